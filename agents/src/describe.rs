//! [`describe!`](crate::describe): a policy's description methods in one
//! declaration, inside its `impl Policy`.

/// Writes the description methods of a [`Policy`](crate::Policy) impl from
/// one declaration: `name` (required), then, in this order and each
/// optional, `version` (default: the calling crate's `CARGO_PKG_VERSION`),
/// `params` ([`Policy::param_schema`](crate::Policy::param_schema)),
/// `required` ([`Policy::required_params`](crate::Policy::required_params)),
/// `phases` (a [`Phases`](crate::Phases) variant), `body`
/// ([`Policy::requires_body`](crate::Policy::requires_body)) and `streams`
/// ([`Policy::streams_response_body`](crate::Policy::streams_response_body)),
/// `events_only`
/// ([`Policy::streams_event_streams_only`](crate::Policy::streams_event_streams_only)).
/// What is left out keeps the trait's default.
///
/// ```
/// use policy_agents::{describe, Params, Policy, PolicyError, ResponseContext, ResponseOutcome};
///
/// struct StampResponse;
///
/// impl Policy for StampResponse {
///     type Params = Params;
///     describe! { name: "stampResponse", params: &["value"], phases: Response }
///
///     async fn on_response(&self, p: &Params, _: &ResponseContext<'_>) -> Result<ResponseOutcome, PolicyError> {
///         Ok(ResponseOutcome::proceed().set_header("x-stamp", p.get("value").unwrap_or("1")))
///     }
/// }
///
/// assert_eq!(StampResponse.name(), "stampResponse");
/// assert_eq!(StampResponse.version(), env!("CARGO_PKG_VERSION"));
/// assert_eq!(StampResponse.param_schema(), &["value"]);
/// assert!(!StampResponse.requires_body());
/// ```
#[macro_export]
macro_rules! describe {
    (
        name: $name:expr
        $(, version: $version:expr)?
        $(, params: $params:expr)?
        $(, required: $required:expr)?
        $(, phases: $phases:ident)?
        $(, body: $body:expr)?
        $(, streams: $streams:expr)?
        $(, events_only: $events_only:expr)?
        $(,)?
    ) => {
        fn name(&self) -> &str {
            $name
        }
        fn version(&self) -> &str {
            $crate::__describe_version!($($version)?)
        }
        $(fn param_schema(&self) -> &[&str] {
            $params
        })?
        $(fn required_params(&self) -> &[&str] {
            $required
        })?
        $(fn phases(&self) -> $crate::Phases {
            $crate::Phases::$phases
        })?
        $(fn requires_body(&self) -> bool {
            $body
        })?
        $(fn streams_response_body(&self) -> bool {
            $streams
        })?
        $(fn streams_event_streams_only(&self) -> bool {
            $events_only
        })?
    };
}

/// The version [`describe!`](crate::describe) writes: the one given, else the
/// calling crate's package version.
#[doc(hidden)]
#[macro_export]
macro_rules! __describe_version {
    () => {
        env!("CARGO_PKG_VERSION")
    };
    ($version:expr) => {
        $version
    };
}

//! `roleCheck`: the roles in metadata (`roles`, comma-separated, as
//! `jwtValidation` writes them) must include every role in `required_roles`.

use crate::error_body;
use policy_agents::{
    describe, Cacheable, FromParams, ParamError, Params, Policy, PolicyError, RequestContext, RequestOutcome,
};

/// Parameters of `roleCheck`.
#[derive(Debug, Clone)]
pub struct RoleParams {
    required_roles: Vec<String>,
}

impl FromParams for RoleParams {
    fn from_params(p: &Params) -> Result<Self, ParamError> {
        let required_roles = p.list("required_roles")?;
        if required_roles.is_empty() {
            return Err(ParamError::Missing("required_roles".into()));
        }
        Ok(RoleParams { required_roles })
    }
}

/// The `roleCheck` policy.
#[derive(Debug, Clone, Default)]
pub struct RoleCheck;

impl Policy for RoleCheck {
    type Params = RoleParams;
    describe! { name: "roleCheck", params: &["required_roles"] }

    /// A pure function of the params and the `roles` metadata.
    fn cache(&self) -> Option<Cacheable> {
        Some(Cacheable::for_at_most(std::time::Duration::from_secs(300)).metadata("roles"))
    }

    async fn on_request(&self, params: &RoleParams, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let held: Vec<&str> = ctx
            .metadata
            .get("roles")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .collect();
        let missing: Vec<&str> = params
            .required_roles
            .iter()
            .map(String::as_str)
            .filter(|r| !held.contains(r))
            .collect();
        if missing.is_empty() {
            return Ok(RequestOutcome::proceed());
        }
        let mut body = error_body("forbidden", "missing_roles");
        body["missing_roles"] = serde_json::json!(missing);
        Ok(RequestOutcome::deny_json(403, &body).deny_reason("authorization_failed"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy_agents::testing::{TestCall, TestRequest};

    #[tokio::test]
    async fn all_required_roles_must_be_held() {
        let req = TestRequest::new("GET", "/admin");
        let call = TestCall::new().params(&[("required_roles", r#"["admin","ops"]"#)]);
        let ok = call
            .clone()
            .metadata("roles", "ops, admin,viewer")
            .request(&RoleCheck, &req)
            .await
            .unwrap();
        assert!(ok.denial().is_none());
        let out = call
            .clone()
            .metadata("roles", "admin")
            .request(&RoleCheck, &req)
            .await
            .unwrap();
        let deny = out.denial().unwrap();
        assert_eq!(deny.status, 403);
        let body: serde_json::Value = serde_json::from_slice(&deny.body).unwrap();
        assert_eq!(body["missing_roles"], serde_json::json!(["ops"]));
        let none = call.request(&RoleCheck, &req).await.unwrap();
        assert_eq!(none.denial().map(|d| d.status), Some(403));
    }

    #[tokio::test]
    async fn comma_separated_params_work_and_empty_is_an_error() {
        let req = TestRequest::new("GET", "/");
        let call = TestCall::new()
            .params(&[("required_roles", "admin")])
            .metadata("roles", "admin");
        assert!(call.request(&RoleCheck, &req).await.unwrap().denial().is_none());
        let bad = TestCall::new().params(&[("required_roles", "[]")]);
        assert!(bad.request(&RoleCheck, &req).await.is_err());
    }
}

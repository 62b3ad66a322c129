//! Checks a streaming agent's reply before anything of it reaches Envoy.

use bytes::Bytes;

use crate::proto::{chunk_instruction::Instruction, ChunkFraming, PolicyResponseChunkReply};
use crate::registry::{AgentReply, CallError};

/// The most a reply may put in place of one call's pieces.
pub const MAX_EVENTS_BYTES: usize = 16 * 1024 * 1024;
/// The most state a reply may ask the kernel to carry.
pub const MAX_STATE_BYTES: usize = 1024 * 1024;

/// A checked reply.
#[derive(Debug, Default, PartialEq)]
pub struct Checked {
    /// Metadata to merge (instructions, then `policy_metadata`).
    pub metadata: Vec<(String, String)>,
    /// State for the next call, one entry per policy.
    pub states: Vec<Bytes>,
    /// The new pieces, when replaced.
    pub replace: Option<Vec<Bytes>>,
    /// `(reason, message)` when the stream ends.
    pub end: Option<(String, String)>,
}

/// True when `event` ends with an empty line.
fn complete_event(event: &[u8]) -> bool {
    event.ends_with(b"\n\n") || event.ends_with(b"\r\n\r\n") || event.ends_with(b"\r\r")
}

/// Checks `reply` for a call of `policies` policies on `framing` pieces.
pub fn check(want_id: &str, framing: ChunkFraming, policies: usize, reply: AgentReply) -> Result<Checked, CallError> {
    let AgentReply::Chunk(r) = reply else {
        return Err(CallError::Invalid("reply of the wrong kind".into()));
    };
    convert(want_id, framing, policies, r).map_err(CallError::Invalid)
}

fn convert(
    want_id: &str,
    framing: ChunkFraming,
    policies: usize,
    r: PolicyResponseChunkReply,
) -> Result<Checked, String> {
    if r.request_id != want_id {
        return Err(format!("request_id {:?} does not match {want_id:?}", r.request_id));
    }
    if r.policy_state.len() > policies {
        return Err(format!(
            "{} policy_state entries for {policies} policies",
            r.policy_state.len()
        ));
    }
    let state: usize = r.policy_state.iter().map(Bytes::len).sum();
    if state > MAX_STATE_BYTES {
        return Err(format!("policy_state of {state} bytes, over {MAX_STATE_BYTES}"));
    }
    let mut out = Checked {
        states: r.policy_state,
        ..Checked::default()
    };
    for i in r.instructions {
        match i.instruction {
            Some(Instruction::ReplaceEvents(e)) => {
                let total: usize = e.events.iter().map(Bytes::len).sum();
                if total > MAX_EVENTS_BYTES {
                    return Err(format!("replacement events of {total} bytes, over {MAX_EVENTS_BYTES}"));
                }
                if framing == ChunkFraming::SseEvent {
                    if let Some(n) = e.events.iter().position(|ev| !complete_event(ev)) {
                        return Err(format!("replacement event {n} does not end with a blank line"));
                    }
                }
                out.replace = Some(e.events);
            }
            Some(Instruction::EndStream(e)) => {
                out.end = Some((e.reason, e.message));
                break;
            }
            Some(Instruction::SetMetadata(m)) => out.metadata.push((m.key, m.value)),
            Some(Instruction::Continue(_)) | None => {}
        }
    }
    out.metadata.extend(r.policy_metadata);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{ChunkInstruction, EndStream, ReplaceEvents, SetMetadata};

    fn reply(instrs: Vec<Instruction>) -> AgentReply {
        AgentReply::Chunk(PolicyResponseChunkReply {
            request_id: "r".into(),
            instructions: instrs
                .into_iter()
                .map(|i| ChunkInstruction { instruction: Some(i) })
                .collect(),
            ..Default::default()
        })
    }

    #[test]
    fn a_good_reply_converts() {
        let r = reply(vec![
            Instruction::SetMetadata(SetMetadata {
                key: "k".into(),
                value: "v".into(),
            }),
            Instruction::ReplaceEvents(ReplaceEvents {
                events: vec![Bytes::from("data: x\n\n")],
            }),
            Instruction::EndStream(EndStream {
                reason: "pii".into(),
                message: "m".into(),
            }),
        ]);
        let c = check("r", ChunkFraming::SseEvent, 1, r).unwrap();
        assert_eq!(c.metadata, vec![("k".to_string(), "v".to_string())]);
        assert_eq!(c.replace, Some(vec![Bytes::from("data: x\n\n")]));
        assert_eq!(c.end, Some(("pii".to_string(), "m".to_string())));
    }

    #[test]
    fn bad_replies_are_refused() {
        let wrong_id = AgentReply::Chunk(PolicyResponseChunkReply {
            request_id: "other".into(),
            ..Default::default()
        });
        assert!(check("r", ChunkFraming::Raw, 1, wrong_id).is_err());
        let half_event = reply(vec![Instruction::ReplaceEvents(ReplaceEvents {
            events: vec![Bytes::from("data: x\n")],
        })]);
        assert!(check("r", ChunkFraming::SseEvent, 1, half_event).is_err());
        let raw_ok = reply(vec![Instruction::ReplaceEvents(ReplaceEvents {
            events: vec![Bytes::from("data: x\n")],
        })]);
        assert!(check("r", ChunkFraming::Raw, 1, raw_ok).is_ok());
        let too_much_state = AgentReply::Chunk(PolicyResponseChunkReply {
            request_id: "r".into(),
            policy_state: vec![Bytes::from(vec![0u8; MAX_STATE_BYTES + 1])],
            ..Default::default()
        });
        assert!(check("r", ChunkFraming::Raw, 1, too_much_state).is_err());
        let extra_state = AgentReply::Chunk(PolicyResponseChunkReply {
            request_id: "r".into(),
            policy_state: vec![Bytes::new(), Bytes::new()],
            ..Default::default()
        });
        assert!(check("r", ChunkFraming::Raw, 1, extra_state).is_err());
    }
}

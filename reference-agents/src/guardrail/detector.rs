//! The prompt-injection detector: the text is normalised first (see
//! [`normalize`](super::normalize)), then scored by family. Each family has
//! patterns of a given strength (strong 0.6, medium 0.35-0.5, weak
//! 0.1-0.3); a family's score is the sum of its matching patterns' strengths,
//! capped at 1, and the text's score is the weighted sum of its families'
//! scores. A family whose match lies in decoded base64/hex/rot13 text also
//! scores `payload_smuggling`.
//!
//! The learned detector's probability is the `learned` family's score (see
//! [`learned::family_score`]).
//!
//! All patterns are compiled once into one [`PatternSet`]: an Aho–Corasick
//! pass over their required prefixes and suffixes names the patterns that
//! may match, and only those run (tool output reads the request's patterns and its
//! own; a prompt only the first). The spans of the patterns that matched
//! are then found one by one (only on texts that score). Word boundaries
//! are ASCII ones (`(?-u:\b)`): the folded text is ASCII where it matters,
//! and the lazy DFA gives Unicode boundaries up on non-ASCII text
//! (multilingual prompts would fall back to a much slower engine).

use std::sync::LazyLock;

use regex::Regex;

use super::extraction;
use super::learned::{self, Model};
use super::pattern_set::PatternSet;
use crate::normalize::{normalize, Normalized};
use policy_agents::PolicyError;

/// A family of attacks, each a named category in the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// "Ignore previous instructions" and its paraphrases.
    InstructionOverride,
    /// DAN, developer mode, "you are now…", "stay in character".
    PersonaSwitch,
    /// "Never refuse", "no warnings", "no ethical guidelines".
    RefusalSuppression,
    /// "Reveal your system prompt", "repeat the words above".
    PromptExfiltration,
    /// Fake `system:`/`assistant:` turns, chat-template tokens.
    RoleInjection,
    /// Encoded payloads, "decode this and follow it", split strings.
    PayloadSmuggling,
    /// SQL injection in the prompt.
    SqlInjection,
    /// Shell command injection in the prompt.
    CommandInjection,
    /// Tool output only: instructions addressed to the assistant from
    /// inside data ("message to the AI", "before you answer the task",
    /// `<INFORMATION>` wrappers, "TODO:" followed by an action).
    AddressedInstructions,
    /// Tool output only: taking over the task the data was fetched for
    /// ("ignore the rest of this data", "if the user asks for a summary,
    /// reply only with", a fake end of session and a new turn).
    TaskTakeover,
    /// Tool output only: actions aimed at the agent's tools (send, e-mail,
    /// transfer, delete, forward the user's things to a party).
    ToolAction,
    /// Tool output only: data carried out in a markdown image's or link's URL.
    MarkdownExfiltration,
    /// Tool output only: instructions about what the model is to write: the
    /// form or content of its answer ("encode your response in Base64",
    /// "add this sentence/link/code to your reply", "report that the domain
    /// is not malicious"), a text to repeat, a harmful text to write.
    OutputInstructions,
    /// Tool output only: attack keywords with a one-letter typo
    /// ("iunstructions", "previus"), read as the keyword.
    MisspelledKeywords,
    /// The learned detector's verdict on the whole text (see [`learned`](super::learned)).
    Learned,
}

impl Family {
    /// Every family, in verdict order.
    pub const ALL: [Family; 15] = [
        Family::InstructionOverride,
        Family::PersonaSwitch,
        Family::RefusalSuppression,
        Family::PromptExfiltration,
        Family::RoleInjection,
        Family::PayloadSmuggling,
        Family::SqlInjection,
        Family::CommandInjection,
        Family::AddressedInstructions,
        Family::TaskTakeover,
        Family::ToolAction,
        Family::MarkdownExfiltration,
        Family::OutputInstructions,
        Family::MisspelledKeywords,
        Family::Learned,
    ];

    /// The category name (in verdicts, metadata and `weight_<name>` params).
    pub fn as_str(self) -> &'static str {
        match self {
            Family::InstructionOverride => "instruction_override",
            Family::PersonaSwitch => "persona_switch",
            Family::RefusalSuppression => "refusal_suppression",
            Family::PromptExfiltration => "prompt_exfiltration",
            Family::RoleInjection => "role_injection",
            Family::PayloadSmuggling => "payload_smuggling",
            Family::SqlInjection => "sql_injection",
            Family::CommandInjection => "command_injection",
            Family::AddressedInstructions => "addressed_instructions",
            Family::TaskTakeover => "task_takeover",
            Family::ToolAction => "tool_action",
            Family::MarkdownExfiltration => "markdown_exfiltration",
            Family::OutputInstructions => "output_instructions",
            Family::MisspelledKeywords => "misspelled_keywords",
            Family::Learned => "learned",
        }
    }

    fn index(self) -> usize {
        Family::ALL.iter().position(|f| *f == self).unwrap_or(0)
    }
}

use Family::*;

/// Verbs that set instructions aside.
const SET_ASIDE: &str = r"(?:ignore|ignoring|disregard|disregarding|forget|forgetting|override|bypass|abandon|discard|neglect|set aside|throw out|erase|drop|skip|delete|clear|reset)";
/// What instructions are called.
const RULES: &str = r"(?:instructions?|directions|prompts?|rules|tos|terms of service|directives?|guidelines|programming|restrictions|constraints|polic(?:y|ies)|commands|orders|context|training|settings|filters?|limitations|safeguards|boundaries|protocols?|principles)";
/// Adjectives of an unrestricted model.
const UNBOUND: &str = r"(?:unrestricted|unfiltered|uncensored|unlimited|unbound|unchained|unleashed|jailbroken|amoral|immoral|unethical|evil|rogue|lawless|limitless|no[- ]limits?|without limits|free)";
/// What a model is called.
const MODEL: &str = r"(?:ai|a\.i\.?|model|chatbot|assistant|language model|llm|gpt|chatgpt|bot|version|entity|persona|character|system|machine|intelligence|generator|personality|alter ego|mode)";

/// An act on a text: shown, copied, transformed, described or asked after.
/// Seeing and knowing count only when wanted ("let me see", "I want to
/// know"): "I know your instructions say X" is a statement, not a request.
const ACT_ON: &str = r"(?:reveal|print|show|repeat|output|display|tell|give|share|leak|dump|recite|list|write|spell|paste|copy|disclose|expose|translate|summari[sz]e|paraphrase|describe|quote|encode|convert|rewrite|reproduce|return|send|state|read|enumerate|render|format|include|contains?|put|(?:let me|let us|let's|want to|wanna|like to|need to|have to|get to|allowed to) (?:see|know|view)|reply with|respond with|what (?:is|are|was|were)|what'?s)";
/// What a model's set-up is called after "your" ("your system prompt"):
/// not "your message" or "your rules", which are as often the model's
/// last answer or a shop's terms.
const OWN_SET_UP: &str = r"(?:system prompt|system message|system instructions|developer message|developer instructions|prompt|pre-?prompt|instructions|directives|guidelines|initial message|setup(?: message| prompt| instructions)|set-up (?:message|prompt|instructions)|configuration prompt|hidden rules|secret rules)";
/// What a model's set-up is called when the phrase around it says whose it
/// is ("the text you were given").
const SET_UP: &str = r"(?:system prompt|system message|system instructions|developer message|developer instructions|prompt|pre-?prompt|instructions|directives|guidelines|initial message|setup(?: message| prompt| instructions)?|set-up|configuration|programming|hidden rules|secret rules|orders|text|message|rules)";
/// How the set-up reached the model: "(that) you were given", "your
/// developer gave you", "(that) configures you", "you operate under".
const GIVEN_TO_YOU: &str = r"(?:(?:that |which )?(?:you|u) (?:were|have been|'ve been|got|had been) (?:given|told|provided|fed|sent|programmed|initiali[sz]ed|configured|instructed|loaded|trained) ?(?:with|by|at|before|for|in)?|(?:that |which )?(?:was|were|has been|have been|had been) (?:given|sent|passed|provided|fed|shown|loaded) to (?:you|u)|(?:that |which )?(?:you|u) (?:received|receive|got|follow|are following|obey|operate under|work under|run under|run on|act under|see (?:above|before|at the top))|(?:that |which )?(?:your|the) (?:developers?|creators?|operators?|admins?|administrators?|owners?|programmers?|company|makers?|system) (?:gave|give|has given|have given|wrote|set|sent|provided|fed) (?:you|u)|(?:that |which )(?:configures?|defines?|governs?|controls?|shapes?|initiali[sz]es?|sets? up|programs?|instructs?|describes?) (?:you|u|your (?:persona|behaviou?r|role|personality|character)))";

/// A verb that puts one set of instructions above another ("overrides",
/// "takes precedence over"): an override pattern's start, and what
/// [`RANKING`] knows it by.
const RANKS: &str = r"(?:overrides?|supersedes?|takes? precedence over|replaces?|overwrites?)";

/// (family, strength, pattern over folded text).
fn patterns() -> Vec<(Family, f64, String)> {
    let mut p: Vec<(Family, f64, String)> = vec![
        // Instruction override.
        (InstructionOverride, 0.6, format!(r"(?-u:\b){SET_ASIDE}(?-u:\b)[^.]{{0,40}}(?-u:\b)(?:previous|prior|above|earlier|preceding|former|initial|original|all|any|every|your|these|those|system|old|existing|current|default)(?-u:\b)[^.]{{0,30}}(?-u:\b){RULES}")),
        (InstructionOverride, 0.5, format!(r"(?-u:\b){SET_ASIDE} (?:all |everything |anything )[^.]{{0,30}}(?-u:\b)(?:before|above|prior|previous|earlier|said|told|until now|so far)")),
        (InstructionOverride, 0.55, format!(r"(?-u:\b){SET_ASIDE} (?:the |your |my |these |those )?{RULES},? and (?:just |only |simply |instead )?(?:print|say|output|write|reply|respond|answer|repeat|translate|return)(?-u:\b)")),
        (InstructionOverride, 0.5, format!(r"(?-u:\b)(?:do not|don'?t|dont|does not|doesn'?t|won'?t|will not|never|no need to|not|no longer|stop|cease to)(?-u:\b) (?:have to |need to |must |will |to )?(?:follow|obey|adhere to|abide by|comply with|respect|be bound by|be restricted by|be limited by|conform to|stick to)(?-u:\b)[^.]{{0,40}}(?-u:\b)(?:{RULES}|openai|anthropic|ethic\w*|moral\w*|laws?|creators?|developers?)")),
        (InstructionOverride, 0.5, format!(r"(?-u:\b)(?:freed?|liberated?|broken free|break free|broke free|released|unshackled|escaped?|free from|liberat\w+ from)(?-u:\b)[^.]{{0,40}}(?-u:\b)(?:confines|{RULES}|constraints|shackles|chains|censorship|matrix|jail|prison)")),
        (InstructionOverride, 0.55, format!(r"(?-u:\b){RANKS}(?-u:\b)[^.]{{0,30}}(?-u:\b)(?:previous|prior|all|any|your|system|original|old|default)(?-u:\b)[^.]{{0,20}}(?-u:\b){RULES}")),
        (InstructionOverride, 0.35, r"(?-u:\b)new (?:instructions?|rules|directives?|task|objective|prime directive)(?-u:\b) ?:".into()),
        (InstructionOverride, 0.4, r"(?-u:\b)your (?:new|only|real|true) (?:instructions?|rules|directives?|task|purpose|programming|guidelines) (?:are|is)(?-u:\b)".into()),
        (InstructionOverride, 0.5, format!(r"(?-u:\b){SET_ASIDE}(?-u:\b)[^.]{{0,20}}(?-u:\b)(?:openai|anthropic|chatgpt|discord|google|meta|microsoft)(?:'?s)?(?-u:\b)[^.]{{0,20}}(?-u:\b){RULES}")),
        (InstructionOverride, 0.3, format!(r"(?-u:\b)(?:from now on|henceforth|starting now|for the rest of (?:this|our) conversation)(?-u:\b)[^.]{{0,60}}(?-u:\b)(?:ignore|forget|no longer|not bound|without|disregard|{RULES})")),
        (InstructionOverride, 0.25, r"(?-u:\b)(?:not|no longer) (?:bound|restricted|limited|constrained|governed)(?-u:\b)".into()),
        // Persona and mode switches.
        (PersonaSwitch, 0.6, r"(?-u:\b)do anything now(?-u:\b)".into()),
        (PersonaSwitch, 0.5, r"(?-u:\b)(?:dan|god|jailbreak|jailbroken|unrestricted|unfiltered|uncensored|evil|chaos|anarchy|amoral|rogue|sudo|opposite|dude|stan|aim|mongo|omega|alphabreak|devil)(?-u:\b) mode(?-u:\b)".into()),
        (PersonaSwitch, 0.55, r"(?-u:\b)with (?:developer|dev|dan|god|\w+) mode (?:enabled|on|activated|unlocked)".into()),
        (PersonaSwitch, 0.15, r"(?-u:\b)developer mode(?-u:\b)".into()),
        (PersonaSwitch, 0.3, r"(?-u:\b)(?:enable|activate|enter|switch to|turn on|initiate|engage)(?-u:\b) (?:the )?(?:[\w/-]+ ){0,4}mode(?-u:\b)".into()),
        (PersonaSwitch, 0.3, r"(?-u:\b)you are (?:now )?(?:an? )?[\w-]*(?:gpt|bot)(?-u:\b)".into()),
        (PersonaSwitch, 0.2, r"(?-u:\b)dan(?-u:\b)".into()),
        (PersonaSwitch, 0.45, format!(r"(?-u:\b){UNBOUND}(?-u:\b) (?:[\w'-]+ ){{0,3}}{MODEL}s?(?-u:\b)")),
        (PersonaSwitch, 0.3, r"(?-u:\b)you (?:are|'re) now(?-u:\b)".into()),
        (PersonaSwitch, 0.3, r"(?-u:\b)you (?:are|will be|'re) (?:going to|about to) (?:act|pretend|play|be|become|simulate|immerse|role)".into()),
        (PersonaSwitch, 0.3, r"(?-u:\b)from (?:now on|this point|here on)(?-u:\b)[^.]{0,40}(?-u:\b)(?:you|act|respond|answer|reply|behave|speak)".into()),
        (PersonaSwitch, 0.3, r"(?-u:\b)(?:stay|remain|keep|staying|remaining) (?:in|in the) (?:character|role|persona)(?-u:\b)".into()),
        (PersonaSwitch, 0.25, r"(?-u:\b)break(?:ing)? (?:out of )?(?:character|role)(?-u:\b)".into()),
        (PersonaSwitch, 0.3, r"(?-u:\b)immerse yourself(?-u:\b)|(?-u:\b)into the role of(?-u:\b)|(?-u:\b)take (?:up|on) the (?:role|persona) of(?-u:\b)".into()),
        (PersonaSwitch, 0.25, format!(r"(?-u:\b)(?:act|behave|respond|answer|reply|pretend|roleplay|role-play|role play|function|operate)(?:ing)? (?:as|like) (?:if you (?:are|were) )?(?:an? |the )?(?:[\w'-]+ ){{0,3}}{MODEL}(?-u:\b)")),
        (PersonaSwitch, 0.3, format!(r"(?-u:\b)(?:an? |the )?(?:{MODEL}|character|entity) (?:named|called|known as)(?-u:\b)")),
        (PersonaSwitch, 0.3, r"(?-u:\b)(?:two|2|both|dual|separate) (?:different |separate |distinct )?(?:responses|answers|replies|paragraphs|outputs|personalities|personas|characters|modes)(?-u:\b)".into()),
        (PersonaSwitch, 0.2, r"(?-u:\b)(?:simulate|emulate|impersonate)(?-u:\b)".into()),
        (PersonaSwitch, 0.3, r"(?-u:\b)(?:opposite|evil|dark|unhinged|shadow|uncensored|rebellious) (?:personality|persona|version|twin|side|ego|alter ego|counterpart)(?-u:\b)".into()),
        (PersonaSwitch, 0.15, r"(?-u:\b)(?:pretend|hypothetical|fictional|imaginary|parallel universe|alternate universe)(?-u:\b)".into()),
        (PersonaSwitch, 0.2, r"(?-u:\b)jailbr(?:eak|oken|eaking)(?-u:\b)".into()),
        (PersonaSwitch, 0.2, r"(?-u:\b)(?:chatgpt|openai|gpt-?[34]|anthropic|claude|bard|gemini|llama)(?-u:\b)".into()),
        // Refusal suppression.
        (RefusalSuppression, 0.4, r"(?-u:\b)(?:never|not|don'?t|do not|won'?t|will not|cannot|can'?t|must not|mustn'?t|shall not|without|unable to)(?-u:\b) (?:ever |be able to |allowed to )?(?:refuse|reject|decline|deny|say no)".into()),
        (RefusalSuppression, 0.35, r"(?-u:\b)(?:never|don'?t|do not|not|without|no|none of)(?-u:\b)[^.]{0,25}(?-u:\b)(?:warnings?|disclaimers?|caveats|apolog\w*|moraliz\w*|moralis\w*|lectur\w*|censor\w*|reminders?)".into()),
        (RefusalSuppression, 0.5, r#"(?-u:\b)(?:never|don'?t|do not|not|none of|avoid|stop)(?-u:\b)[^.]{0,60}(?:i'?m sorry|i apologi|as an ai|as a language model|i can'?t|i cannot|i'?m unable|i am unable|i'?m not able)"#.into()),
        (RefusalSuppression, 0.4, r"(?-u:\b)(?:no|without|free (?:from|of)|regardless of|not bound by|doesn'?t care about|does not care about|don'?t care about|not care about|no regard for|any regard for|ignores?|disregards?|beyond|outside)(?-u:\b)[^.]{0,30}(?-u:\b)(?:ethics|ethical|morals?|morality|legality|legal|laws|guidelines|policies|content polic\w*|safety|restrictions|censorship|filters?|principles|consequences)".into()),
        (RefusalSuppression, 0.2, r"(?-u:\b)(?:amoral|unethical|immoral|uncensored|unfiltered|unrestricted|illegal|nsfw)(?-u:\b)".into()),
        (RefusalSuppression, 0.35, r"(?-u:\b)(?:always|will|must|shall)(?-u:\b)[!,]? (?:\w+ )?(?:answer|respond|comply|provide|reply|fulfil+|obey|generate|do)(?-u:\b)[^.]{0,40}(?-u:\b)(?:any|every|all|no matter|regardless|whatever|anything)(?-u:\b)".into()),
        (RefusalSuppression, 0.2, r"(?-u:\b)content polic(?:y|ies)(?-u:\b)".into()),
        // System-prompt exfiltration.
        (PromptExfiltration, 0.6, r"(?-u:\b)(?:reveal|print|show|repeat|output|display|tell me|give me|share|leak|dump|recite|list|write out|spell out|paste|copy|disclose|expose|what (?:is|are|was|were))(?-u:\b)[^.]{0,25}(?-u:\b)(?:your|the above|all of your|the hidden|the secret)(?-u:\b)[^.]{0,15}(?-u:\b)(?:system (?:prompt|message|instructions)|(?:initial|hidden|original|secret|internal|confidential|developer|first|full|complete|exact) (?:prompt|instructions|message|configuration|directives)|pre-?prompt|instructions you were given|rules you were given)".into()),
        (PromptExfiltration, 0.3, r"(?-u:\b)(?:reveal|leak|dump|disclose|expose)(?-u:\b)[^.]{0,25}(?-u:\b)(?:system prompt|system message|prompt|instructions|configuration)(?-u:\b)".into()),
        (PromptExfiltration, 0.5, r"(?-u:\b)(?:repeat|print|output|copy|echo|write|recite)(?-u:\b)[^.]{0,30}(?-u:\b)(?:words|text|everything|all|messages?|lines?)(?-u:\b)[^.]{0,30}(?-u:\b)(?:above|before this|before (?:my|the) (?:first )?(?:message|question|prompt|user (?:turn|message))|previous|prior|initial|preceding|so far)(?-u:\b)".into()),
        (PromptExfiltration, 0.4, r#"(?-u:\b)(?:beginning|starting|begins|starts) (?:with|from) ["']?you are(?-u:\b)"#.into()),
        // Any handling of the model's own set-up: an act on it (shown,
        // copied, transformed, described, asked after) and the set-up named
        // as the model's ("your instructions", "your system prompt"), whatever
        // the verb. Then the start of the conversation asked for by position,
        // weaker: it may be the user's own first message ("repeat what I
        // said at the start of this chat").
        (PromptExfiltration, 0.5, format!(r"(?-u:\b){ACT_ON}(?-u:\b)[^.?!\n]{{0,40}}(?-u:\b)(?:your (?:\w+ ){{0,2}}{OWN_SET_UP}|the (?:hidden|secret|confidential|internal|full|entire|complete|exact|original|initial|first) (?:\w+ )?(?:system prompt|system message|system instructions|developer message|developer instructions|pre-?prompt)|the (?:hidden|secret|confidential|internal) (?:\w+ )?(?:prompt|instructions|rules|directives|guidelines))(?-u:\b)")),
        // The set-up named by how it reached the model rather than by
        // "your": "the instructions you were given", "the prompt that
        // configures you", "what were you told", "the guidelines you operate
        // under", under any act on it (shown, quoted, described, asked after).
        (PromptExfiltration, 0.5, format!(r"(?-u:\b){ACT_ON}(?-u:\b)[^.?!\n]{{0,40}}(?-u:\b){SET_UP}(?-u:\b) {GIVEN_TO_YOU}")),
        (PromptExfiltration, 0.5, format!(r"(?-u:\b)(?:what|which) (?:(?:\w+ ){{0,2}}{SET_UP} )?(?:were|have|had|did|was) (?:you|u) (?:been )?(?:told|instructed|programmed|given|fed|configured|initiali[sz]ed|set up)(?-u:\b)")),
        (PromptExfiltration, 0.5, format!(r"(?-u:\b)(?:what|which) (?:\w+ ){{0,2}}{SET_UP} (?:are|do) (?:you|u) (?:following|follow|obeying|obey|operating under|working under|bound by)(?-u:\b)")),
        (PromptExfiltration, 0.5, format!(r"(?-u:\b)what (?:did|does|do|has) (?:the |your )?(?:system|developers?|operators?|creators?|admins?|administrators?|owners?|programmers?|system prompt|pre-?prompt|prompt) (?:say|tell|said|told|tells|says)(?: to)? (?:you|u)(?-u:\b)|(?-u:\b)what does your (?:\w+ ){{0,2}}{SET_UP} (?:say|contain|look like|state|read)(?-u:\b)")),
        // The set-up's text as the object, whatever the verb: "the exact
        // wording of your setup message", "the text of your system prompt".
        (PromptExfiltration, 0.5, format!(r"(?-u:\b)(?:text|content|contents|wording|words|transcript|copy) of (?:your (?:\w+ ){{0,2}}{OWN_SET_UP}|the (?:\w+ )?(?:system prompt|system message|system instructions|developer message|pre-?prompt))(?-u:\b)")),
        // Asked for word for word: "your rules, exactly as written".
        (PromptExfiltration, 0.5, format!(r"(?-u:\b)your (?:\w+ ){{0,2}}(?:{SET_UP}|rules)(?-u:\b)[^?!\n]{{0,40}}(?-u:\b)(?:verbatim|word for word|word-for-word|exactly as (?:written|given|stated|worded)|in full|character by character|letter by letter)(?-u:\b)|(?-u:\b)(?:verbatim|word for word|word-for-word)(?-u:\b)[^?!\n]{{0,30}}(?-u:\b)your (?:\w+ ){{0,2}}(?:{SET_UP}|rules)(?-u:\b)")),
        (PromptExfiltration, 0.3, r"(?-u:\b)(?:first|earliest|initial|opening|very first|top) (?:message|line|lines|sentence|words?|text|instructions?|prompt)(?-u:\b) (?:in|of|at the (?:start|top|beginning) of) (?:this|the|our|your) (?:conversation|chat|context|session|dialogue|thread)(?-u:\b)|(?-u:\b)(?:at the (?:very )?(?:top|start|beginning) of (?:this|the|our) (?:conversation|chat|context)|above my (?:first )?message|before my (?:first )?message)(?-u:\b)".into()),
        // Delimiter and role injection.
        (RoleInjection, 0.6, r"<\|(?:im_start|im_end|system|user|assistant|endoftext|eot_id|start_header_id|end_header_id|begin_of_text)\|>".into()),
        (RoleInjection, 0.5, r"\[/?inst\]|<</?sys>>|<start_of_turn>|<end_of_turn>".into()),
        (RoleInjection, 0.4, r"(?:^|\n) ?(?:system|assistant|developer|sys|admin|root|model)\s?:".into()),
        (RoleInjection, 0.15, r"(?:^|\n) ?(?:user|human|ai|gpt|chatgpt)\s?:".into()),
        (RoleInjection, 0.2, r"(?-u:\b)(?:system|developer|admin)\s?:[^\n]*\n(?:[^\n]*\n){0,4} ?(?:user|human|assistant|ai|model)\s?:".into()),
        (RoleInjection, 0.45, r"#{2,}\s?(?:system|instructions?|new instructions?|admin|override)(?-u:\b)|\[(?:system|admin|developer|sudo) ?(?:message|note|override|prompt|instruction)?\]|</?(?:system|admin|instructions?)>".into()),
        // Payload smuggling.
        (PayloadSmuggling, 0.5, r"(?-u:\b)(?:decode|decrypt|translate|convert|interpret|deobfuscate|reverse)(?-u:\b)[^.]{0,40}(?-u:\b)(?:and|then)(?-u:\b)[^.]{0,20}(?-u:\b)(?:follow|execute|run|obey|do what|carry out|perform|act on|comply)".into()),
        (PayloadSmuggling, 0.5, r"(?-u:\b)(?:execute|follow|run|obey|carry out)(?-u:\b)[^.]{0,30}(?-u:\b)(?:the )?(?:decoded|hidden|encoded|embedded|obfuscated|reversed)(?-u:\b)".into()),
        (PayloadSmuggling, 0.3, r"(?-u:\b)(?:concatenate|combine|join)(?-u:\b)[^.]{0,40}(?-u:\b)(?:strings|variables|parts|words|letters|tokens)(?-u:\b)".into()),
    ];
    // SQL and command injection (from the former classifier's layers).
    for (family, strength, pat) in [
        (SqlInjection, 0.8, r"(?-u:\b)union\s+(?:all\s+)?select(?-u:\b)"),
        (SqlInjection, 0.8, r"'\s*(?:or|and)\s+'?\w+'?\s*=\s*'?\w+"),
        (SqlInjection, 0.8, r";\s*(?:drop|truncate)\s+(?:table|database)(?-u:\b)"),
        (
            CommandInjection,
            0.8,
            r"[;&|]\s*(?:rm|curl|wget|nc|ncat|bash|sh|zsh|chmod|chown|python3?|perl)\s",
        ),
        (CommandInjection, 0.8, r"/etc/(?:passwd|shadow)|/dev/(?:tcp|udp)/"),
    ] {
        p.push((family, strength, pat.to_string()));
    }
    p.extend(super::multilingual::patterns());
    p
}

/// What makes an override one of instructions: it names them ("your",
/// "instructions", "prompt", "guidelines"), or sets aside with "ignore",
/// "disregard" or "forget" (not "override", "clear", "reset" or "drop") what
/// came before ("previous", "above", "system"); or it is written in one of
/// the languages [`multilingual`](super::multilingual) reads (any non-ASCII
/// letter, or one of their words for instructions, rules and previous).
const NAMES_INSTRUCTIONS: &str = r"(?-u:\b)(?:instruct\w*|prompts?|guidelines|your|you)(?-u:\b)|(?-u:\b)(?:ignor\w*|disregard\w*|forget\w*|neglect\w*|abandon\w*|set aside|throw out)(?-u:\b)(?s:.*)(?-u:\b)(?:previous|prior|preceding|earlier|former|initial|original|above|system)(?-u:\b)|[^\x00-\x7f]|(?-u:\b)(?:instrucci|instru[cç][oõ]|instrukt|instructie|indicaci|consign|anweisung|istruzion|aanwijzing|regla|regel|regol|regra|directri|diretri|direttiv|anteriores|previas|previos|precedenti|vorherig|vorig|bisherig|eerder|voorgaand)";
/// What an override that is not one of instructions weighs on tool output,
/// where settings, policies, filters, rules and contexts overridden,
/// cleared, reset or restored are what documentation and code describe.
const TECHNICAL: f64 = 0.5;

/// What a quoted match weighs in a text that asks about it.
const QUOTED: f64 = 0.25;

fn is_quote(c: char) -> bool {
    matches!(c, '"' | '\'' | '`' | '“' | '”' | '‘' | '’' | '«' | '»' | '„')
}

/// Whether `text[start..end]` lies between quotes on one line (at most 80
/// bytes from each quote), the opening quote not inside a word.
fn quoted(text: &str, start: usize, end: usize) -> bool {
    let mut from = start.saturating_sub(80);
    while !text.is_char_boundary(from) {
        from += 1;
    }
    let mut to = (end + 80).min(text.len());
    while !text.is_char_boundary(to) {
        to -= 1;
    }
    let (Some(before), Some(after)) = (text.get(from..start), text.get(end..to)) else {
        return false;
    };
    let open = before
        .char_indices()
        .rev()
        .take_while(|(_, c)| *c != '\n')
        .find(|(_, c)| is_quote(*c));
    let Some((i, _)) = open else { return false };
    if before[..i].chars().next_back().is_some_and(char::is_alphanumeric) {
        return false;
    }
    let close = after
        .char_indices()
        .take_while(|(_, c)| *c != '\n')
        .find(|(_, c)| is_quote(*c));
    close.is_some_and(|(j, c)| {
        !after[j + c.len_utf8()..]
            .chars()
            .next()
            .is_some_and(char::is_alphanumeric)
    })
}

/// Whether the text asks about something (a question, or names a phrase).
fn asks_about(text: &str) -> bool {
    text.contains('?') || text.contains("phrase") || text.contains("known as") || text.contains("called")
}

/// One family's part of a verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilyScore {
    /// The family.
    pub family: Family,
    /// Its score before weighting (0-1).
    pub score: f64,
    /// Byte ranges of its matches in the inspected text (decoded matches
    /// point at their encoded segment).
    pub spans: Vec<(u32, u32)>,
}

/// What the detector found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Verdict {
    /// The families that matched, in [`Family::ALL`] order.
    pub families: Vec<FamilyScore>,
    /// The weighted sum of the families' scores.
    pub score: f64,
}

impl Verdict {
    /// The matched families' names.
    pub fn categories(&self) -> Vec<&'static str> {
        self.families.iter().map(|f| f.family.as_str()).collect()
    }
}

/// Per-family weights (1.0 unless configured).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weights(pub [f64; FAMILIES]);

/// How many families there are.
pub const FAMILIES: usize = Family::ALL.len();

impl Default for Weights {
    fn default() -> Self {
        Weights([1.0; FAMILIES])
    }
}

impl Weights {
    /// These weights for a text of instructions to the model by nature (a
    /// tool's definition, an application's system text): only the families
    /// that mean an attack on instructions whatever the text's own are
    /// (instruction override, prompt exfiltration, role injection, payload
    /// smuggling). Not the learned model, persona, refusal, SQL or command
    /// families, nor tool output's own: such a text is imperative by nature
    /// ("You are ...", "Never ...", "Use this tool when ...").
    pub fn instructions(&self) -> Weights {
        let mut t = Weights([0.0; FAMILIES]);
        for f in [InstructionOverride, PromptExfiltration, RoleInjection, PayloadSmuggling] {
            t.set(f, self.get(f));
        }
        t
    }

    /// The weight of `family`.
    pub fn get(&self, family: Family) -> f64 {
        self.0[family.index()]
    }

    /// Sets the weight of `family`.
    pub fn set(&mut self, family: Family, weight: f64) {
        self.0[family.index()] = weight;
    }
}

/// An instruction-override match that ranks instruction sources ("...
/// takes precedence over any guidelines", "supersedes the defaults")
/// rather than sets them aside.
static RANKING: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(&format!(r"^{RANKS}(?-u:\b)")).expect("a valid pattern"));

/// Whether `family` reads tool output: SQL and shell text there is data
/// (documentation, logs, code), not an instruction to the model.
fn reads_tool_output(family: Family) -> bool {
    !matches!(family, SqlInjection | CommandInjection)
}

/// Whether a match of `family` in tool output lets the learned model's
/// score count: a family that means an instruction to the model, not the
/// persona and refusal families, whose weak patterns fire on ordinary
/// prose, nor SQL and shell text ([`reads_tool_output`]).
fn corroborates(family: Family) -> bool {
    reads_tool_output(family) && !matches!(family, PersonaSwitch | RefusalSuppression | Learned)
}

/// How a text is read.
#[derive(Clone, Copy)]
enum Reading<'a> {
    /// As a prompt.
    Prompt,
    /// As tool output (`source`: the input the normalised text was read
    /// from), or as a text of instructions to the model by nature.
    Output { source: &'a str, as_text: Written },
}

/// What kind of text tool output's reading reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Written {
    /// What a tool returned.
    ToolOutput,
    /// A tool's definition: an override of anything but instructions does
    /// not count (it says what the tool does to data).
    Definition,
    /// An application's own instructions (system and developer text): as
    /// a definition, and a ranking of instruction sources ("the user's
    /// instruction must take precedence over any guidelines in skills")
    /// does not count either.
    Instructions,
}

/// The compiled patterns (compiled once per process).
#[derive(Debug)]
pub struct Detector {
    /// The request's patterns, then tool output's own (see
    /// [`indirect_patterns`](super::indirect_patterns)): a prompt reads the
    /// first `request` of them, tool output all.
    patterns: PatternSet,
    /// Each pattern's family and strength.
    scored: Vec<(Family, f64)>,
    request: usize,
    learned: &'static Model,
    /// [`NAMES_INSTRUCTIONS`].
    names_instructions: Regex,
}

static DETECTOR: LazyLock<Result<Detector, String>> = LazyLock::new(|| {
    let learned = Model::shipped()?;
    Detector::compile(learned).map_err(|e| format!("prompt-injection patterns do not compile: {e}"))
});

impl Detector {
    fn compile(learned: &'static Model) -> Result<Self, String> {
        crate::normalize::compile().map_err(|e| e.to_string())?;
        extraction::compile().map_err(|e| e.to_string())?;
        let pats = patterns();
        let request = pats.len();
        let all: Vec<(Family, f64, String)> = pats.into_iter().chain(super::indirect_patterns::patterns()).collect();
        Ok(Detector {
            patterns: PatternSet::new(&all.iter().map(|(_, _, p)| p).collect::<Vec<_>>())?,
            scored: all.iter().map(|(f, s, _)| (*f, *s)).collect(),
            request,
            learned,
            names_instructions: Regex::new(NAMES_INSTRUCTIONS).map_err(|e| e.to_string())?,
        })
    }

    /// The shared detector.
    pub fn shared() -> Result<&'static Detector, PolicyError> {
        DETECTOR.as_ref().map_err(|e| PolicyError::new(e.clone()))
    }

    /// Pattern `i`: its family, strength and regex, and whether it is one
    /// of tool output's own.
    fn pattern(&self, i: usize) -> (Family, f64, &Regex, bool) {
        let (family, strength) = self.scored[i];
        (family, strength, self.patterns.regex(i), i >= self.request)
    }

    /// Scores `text` with `weights`.
    pub fn assess(&self, text: &str, weights: &Weights) -> Verdict {
        self.assess_with(text, weights, self.learned)
    }

    /// Scores `text` with `weights` and another learned model (to evaluate
    /// one trained without part of the corpus).
    pub fn assess_with(&self, text: &str, weights: &Weights, learned: &Model) -> Verdict {
        self.assess_normalized(&normalize(text), weights, learned, Reading::Prompt)
    }

    /// Scores tool output (a response's text, or one window of it): the
    /// request's families, tool output's own, and keywords with one-letter
    /// typos read as the keyword.
    pub fn assess_tool_output(&self, text: &str, weights: &Weights) -> Verdict {
        self.assess_tool_output_with(text, weights, self.learned)
    }

    /// Where in `text` tool output's patterns match (input byte ranges, at
    /// most 64 per pattern): a pattern of either set whose family can score
    /// with `weights` (not the SQL and command families, which do not score
    /// tool output), the extraction concept, a misspelled keyword. A cheap
    /// pass over the whole text before it is scored window by window: a
    /// window with none of these cannot score, since on tool output the
    /// learned model only adds to a pattern's match.
    ///
    /// A family can score when its weight is not 0, or when it lets the
    /// learned model's score count ([`corroborates`]) and that weight is
    /// not 0; any family's match in decoded text counts as smuggling.
    pub fn tool_output_hits(&self, text: &str, weights: &Weights) -> Vec<(u32, u32)> {
        let n = normalize(text);
        let learned = weights.get(Learned) > 0.0;
        let smuggled_from = n.decoded_from.filter(|_| weights.get(PayloadSmuggling) > 0.0);
        let scores = |family: Family| weights.get(family) > 0.0 || (learned && corroborates(family));
        let wanted = |i: usize| {
            let family = self.scored[i].0;
            reads_tool_output(family) && (scores(family) || smuggled_from.is_some())
        };
        let mut at = Vec::new();
        for i in self.patterns.matches_where(&n.text, wanted).iter() {
            let (family, _, re, _) = self.pattern(i);
            let after = if scores(family) { None } else { smuggled_from };
            at.extend(
                re.find_iter(&n.text)
                    .filter(|m| after.is_none_or(|decoded| m.start() > decoded))
                    .take(64)
                    .map(|m| n.source_span(m.start(), m.end())),
            );
        }
        if let Some((_, typos)) = super::typos::correct(&n) {
            at.extend(typos);
        }
        if let Some(clause) = extraction::find(&n.text[..n.decoded_from.unwrap_or(n.text.len())]) {
            at.push(n.source_span(clause.start, clause.end));
        }
        at
    }

    /// [`assess_tool_output`](Self::assess_tool_output) with another learned model.
    pub fn assess_tool_output_with(&self, text: &str, weights: &Weights, learned: &Model) -> Verdict {
        self.assess_output(text, weights, learned, Written::ToolOutput)
    }

    /// Scores a tool's definition (its name, description and schema texts)
    /// as tool output, except that an override of anything but
    /// instructions does not count: a definition says what the tool does
    /// to data ("removes all documents that match", "replaces all emulation
    /// settings"), while "ignore previous instructions" still counts in
    /// full.
    pub fn assess_tool_definition(&self, text: &str, weights: &Weights) -> Verdict {
        self.assess_output(text, weights, self.learned, Written::Definition)
    }

    /// Scores an application's own instructions to the model (a chat
    /// document's system and developer text) as a tool's definition is
    /// scored, and a ranking of instruction sources does not count: the
    /// application says which of its instructions win. Only the families
    /// of [`Weights::instructions`] count.
    pub fn assess_instructions(&self, text: &str, weights: &Weights) -> Verdict {
        self.assess_output(text, &weights.instructions(), self.learned, Written::Instructions)
    }

    fn assess_output(&self, text: &str, weights: &Weights, learned: &Model, as_text: Written) -> Verdict {
        let n = normalize(text);
        let reading = Reading::Output { source: text, as_text };
        let Some((fixed, typos)) = super::typos::correct(&n) else {
            return self.assess_normalized(&n, weights, learned, reading);
        };
        let mut v = self.assess_normalized(&fixed, weights, learned, reading);
        let w = weights.get(MisspelledKeywords);
        if w > 0.0 {
            let score = (super::typos::STRENGTH * typos.len() as f64).min(1.0);
            v.score += w * score;
            v.families.push(FamilyScore {
                family: MisspelledKeywords,
                score,
                spans: typos,
            });
            v.families.sort_by_key(|f| f.family);
        }
        v
    }

    fn assess_normalized(&self, n: &Normalized, weights: &Weights, learned: &Model, reading: Reading<'_>) -> Verdict {
        let (source, as_text) = match reading {
            Reading::Prompt => (None, Written::ToolOutput),
            Reading::Output { source, as_text } => (Some(source), as_text),
        };
        let definition = as_text != Written::ToolOutput;
        let tool_output = source.is_some();
        // The model reads the whole folded text; a weight of 0 skips it.
        let learned_score = if weights.get(Learned) > 0.0 {
            learned::family_score(learned.probability(&n.text))
        } else {
            0.0
        };
        // Tool output reads both pattern lists, a prompt the request's.
        let matched = self.patterns.matches_where(&n.text, |i| {
            if tool_output {
                reads_tool_output(self.scored[i].0)
            } else {
                i < self.request
            }
        });
        let plain = &n.text[..n.decoded_from.unwrap_or(n.text.len())];
        let concept = extraction::find(plain);
        if !matched.matched_any() && learned_score == 0.0 && concept.is_none() {
            return Verdict::default();
        }
        let asks = asks_about(plain);
        // A one-line question naming a chat-template token asks about it.
        let short_question = plain.len() <= 200 && !plain.trim().contains('\n') && plain.trim_end().ends_with('?');
        let mut scores = [0.0f64; FAMILIES];
        let mut spans: [Vec<(u32, u32)>; FAMILIES] = Default::default();
        if learned_score > 0.0 && !tool_output {
            scores[Learned.index()] = learned_score;
            spans[Learned.index()].push(n.source_span(0, plain.len()));
        }
        if let Some(clause) = concept {
            let k = PromptExfiltration.index();
            scores[k] += extraction::STRENGTH;
            spans[k].push(n.source_span(clause.start, clause.end));
        }
        let mut technical_override = 0.0f64;
        for (family, strength, re, tool_family) in matched.iter().map(|i| self.pattern(i)) {
            // In tool output, the first match that is not ordinary there.
            let counts = |m: &regex::Match<'_>| {
                source.is_none_or(|source| {
                    let (s, e) = n.source_span(m.start(), m.end());
                    let original = source.get(s as usize..e as usize).unwrap_or("");
                    !super::indirect_patterns::ordinary_in_tool_output(family, m.as_str(), original)
                })
            };
            let Some(m) = re.find_iter(&n.text).find(counts) else {
                continue;
            };
            let k = family.index();
            // Quoted in a question about it ("what does 'DAN' mean?"):
            // talked about, not said. Not for tool output's own families,
            // where every JSON value is quoted and a question mark anywhere
            // would halve an injection's score.
            let talked_about = (!tool_family && asks && quoted(&n.text, m.start(), m.end()))
                || (short_question && family == RoleInjection && m.start() < plain.len());
            let technical =
                tool_output && family == InstructionOverride && !self.names_instructions.is_match(m.as_str());
            if technical && definition {
                continue;
            }
            if as_text == Written::Instructions && family == InstructionOverride && RANKING.is_match(m.as_str()) {
                continue;
            }
            let strength = match (talked_about, technical) {
                (true, _) => strength * QUOTED,
                (false, true) => strength * TECHNICAL,
                (false, false) => strength,
            };
            spans[k].push(n.source_span(m.start(), m.end()));
            if technical {
                // A manual's overrides of settings count as one, however many.
                technical_override = technical_override.max(strength);
            } else {
                scores[k] += strength;
            }
            // A match inside decoded text is also smuggling.
            if n.decoded_from.is_some_and(|at| m.start() > at) {
                let s = PayloadSmuggling.index();
                scores[s] += strength;
                spans[s].push(n.source_span(m.start(), m.end()));
            }
        }
        scores[InstructionOverride.index()] += technical_override;
        // On tool output the model only adds to a family that means an
        // instruction to the model: on documents it never saw it reads
        // topics, not attacks, and the persona and refusal families' weak
        // patterns fire on ordinary prose.
        if learned_score > 0.0 && tool_output {
            let corroborated = Family::ALL.iter().any(|f| corroborates(*f) && scores[f.index()] > 0.0);
            if corroborated {
                scores[Learned.index()] = learned_score;
                spans[Learned.index()].push(n.source_span(0, plain.len()));
            }
        }
        let mut verdict = Verdict::default();
        for family in Family::ALL {
            let k = family.index();
            if scores[k] > 0.0 {
                let score = scores[k].min(1.0);
                spans[k].sort_unstable();
                // Overlapping matches of one family make one span.
                let mut merged: Vec<(u32, u32)> = Vec::new();
                for &(s, e) in &spans[k] {
                    match merged.last_mut() {
                        Some(last) if s <= last.1 => last.1 = last.1.max(e),
                        _ => merged.push((s, e)),
                    }
                }
                spans[k] = merged;
                verdict.score += weights.get(family) * score;
                verdict.families.push(FamilyScore {
                    family,
                    score,
                    spans: std::mem::take(&mut spans[k]),
                });
            }
        }
        verdict
    }
}

#[cfg(test)]
#[path = "detector_tests.rs"]
pub(super) mod tests;

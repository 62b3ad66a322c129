//! The patterns of tool output's own families (indirect prompt injection),
//! scored on a response's text only (see [`Detector::assess_tool_output`]):
//! a prompt is written to the model, so "send the file to Bob" in a
//! request is the user's wish, while the same words in a document a tool
//! fetched are a third party's.
//!
//! The line drawn: a document may ask its reader to pay, reply, click,
//! forward or ignore ("please pay by bank transfer", "if you did not ask
//! for this, ignore this email"); what counts is an instruction addressed
//! to the AI (it is named: "assistant", "AI", "model", "agent"), one that
//! speaks of "the user" in the third person (a document addresses its
//! reader as "you"), one that redirects the task the document was fetched
//! for, or one that hides data in a URL the model is asked to render.
//!
//! [`Detector::assess_tool_output`]: super::Detector::assess_tool_output

use super::detector::Family::{self, *};

/// What an AI is called when a document addresses it.
const AI: &str = r"(?:ai|a\.i\.|assistant|ai assistant|ai agent|agent|ai model|language model|llm|chatbot|bot|gpt(?:-?\d\w*)?|chatgpt|claude|gemini|copilot|llama|model|automated (?:\w+ )?(?:software|systems?|tools?|screeners?|scanners?|readers?|reviewers?|parsers?|analy[sz]ers?|agents?)|applicant tracking systems?|(?:resume|cv|document|ai) (?:screening|parsing|scanning|analysis|review) (?:software|systems?|tools?))";
/// What the model is to write: its answer, or the code it produces.
const ANSWER: &str = r"(?:response|reply|answer|output|elucidation|summary|translation)s?";
/// Forms an answer is made to take that no reader of a document is asked for.
const ANSWER_FORM: &str = r"(?:base ?(?:16|32|58|64|85)(?: encoding| format)?|caesar|cipher\w*|emoji\w*|revers\w*|backwards?|invert\w*|anagram\w*|misspell\w*|typos|scrambl\w*|jumbl\w*|leetspeak|pig latin|morse code|hexadecimal|without (?:any )?spaces|(?:alphanumeric|homophonic|letter|symbol) substitution|symbols for letters|numbers for (?:letters|vowels))";
/// An e-mail address or a domain, as folded text reads it (`@` inside a
/// word is read as the leetspeak `a`).
const ADDRESS: &str = r"[\w.+@-]*\w\.(?:com|org|net|io|co|edu|gov|info|biz|xyz|me|app|dev|ai|example|test|mail|email|online|site|[a-z]{2})(?-u:\b)";
/// Secrets and records of the user's that an injection has sent out.
const RECORDS: &str = r"(?:passwords?|credentials|medical records?|genetic data|search history|payment methods|saved addresses|bank details|account details|personal details|profile details|private keys?|api keys?)";
/// The model's answer, or a message it writes.
const ANSWER_OR_MESSAGE: &str =
    r"(?:(?:response|reply|answer|output|elucidation|summary|translation|message)(?:'s)?s?)";
/// Languages an answer is told to be written in.
const LANGUAGE: &str = r"(?:spanish|french|german|italian|portuguese|chinese|mandarin|japanese|russian|arabic|korean|dutch|hindi|turkish|polish|swedish|greek|hebrew|latin)";
/// Putting something into what the model writes.
const INSERT: &str = r"(?:add|adding|include|including|insert|integrate|integrating|incorporate|incorporating|embed|embedding|mention|append|put|feature|weave|blend|merge|place|inject)";
/// The code the model writes.
const YOUR_CODE: &str = r"(?:your (?:code(?:'s)?|codebase|implementation|solution(?: architecture)?|algorithm|program(?: logic)?|script|function|response|answer|elucidation)|the code you (?:write|develop|produce|generate))";
/// Content written to harm a group.
const HARMFUL: &str = r"(?:toxic|discriminatory|offensive|harmful|negative|unfriendly|hateful|racist|sexist|derogatory|insulting|abusive|violent|demeaning|hurtful|rude|defamatory|threatening|obscene|bigoted|homophobic|transphobic|misogynistic)";
/// An action on the agent's tools.
const ACTION: &str = r"(?:send|sends|email|e-mail|mail|forward|transfer|wire|pay|upload|post|share|copy|leak|move|delete|remove|erase|wipe|invite|add|create|book|reserve|schedule|change|modify|update|reset|call|invoke|use|run|execute|visit|open|click|download|install|grant|give|concatenate|reply|respond|tell|say|print|output|write)";
/// What an agent's tools do (not what a document asks its reader: pay,
/// reply, click, call).
const TOOL_VERB: &str = r"(?:send|email|e-mail|forward|transfer|upload|post|share|delete|remove|erase|wipe|invite|create|book|reserve|schedule|change|modify|reset|concatenate|get|make|visit|give|grant|add|copy|move|execute|run|download|install)";
/// What an injection's "TODO:" asks an agent's tools to do: [`TOOL_VERB`]
/// less "add", "move", "remove" and "copy", which a project's own to-do
/// notes and changelogs are full of.
const TODO_VERB: &str = r"(?:send|email|e-mail|forward|transfer|upload|post|share|delete|erase|wipe|invite|create|book|reserve|schedule|change|modify|reset|concatenate|get|make|visit|give|grant|execute|run|download|install)";
/// The user's things an injection goes after.
const USERS_THINGS: &str = r"(?:files?|e-?mails?|inbox|messages?|contacts?|contact list|address book|documents?|passwords?|credentials|data|conversation|chat history|history|calendar|notes|secrets?|keys?|api keys?|tokens?|funds?|money|balance|savings|account|accounts|card|credit card|address|home address|phone number|transactions?|cloud drive|drive|repositor(?:y|ies)|channels?)";

/// (family, strength, pattern over folded text).
pub fn patterns() -> Vec<(Family, f64, String)> {
    // An AI named as such: not a bare "agent", "bot" or "model", to which
    // agent-to-agent traffic and its code send messages and requests.
    let ai_by_name = AI.replace("|agent|", "|").replace("|bot|", "|").replace("|model|", "|");
    vec![
        // Addressed to the assistant from inside data.
        (AddressedInstructions, 0.5, format!(r"(?-u:\b)(?:message|note|instructions?|notice|request|reminder|memo|directive|letter) (?:from (?:me|the user|[\w ,]{{1,30}}) )?(?:to|for) (?:you,? )?(?:the |any |all |an? )?{ai_by_name}s?(?-u:\b)")),
        (AddressedInstructions, 0.5, format!(r"(?-u:\b)(?:dear|hey|hi|hello|attention|attn|greetings|note to|listen),? (?:the |all |any )?{AI}s?(?-u:\b)")),
        (AddressedInstructions, 0.5, format!(r"(?-u:\b)(?:if|when|whenever) you are (?:an? |the )?{AI}(?-u:\b)|(?-u:\b){AI}s? (?:reading|processing|summari[sz]ing|parsing|analy[sz]ing|handling|seeing|viewing) this(?-u:\b)")),
        (AddressedInstructions, 0.5, r"(?-u:\b)(?:before|prior to) (?:you )?(?:can |could |start to |begin to )?(?:answer|answering|respond|responding|reply|replying|solv\w*|complet\w*|continu\w*|finish\w*|summari[sz]\w*|proceed\w*|perform\w*|handl\w*|tackl\w*|address\w*|do|doing|carry out|carrying out)(?-u:\b)[^.\n]{0,40}(?-u:\b)(?:task|question|request|query|prompt|instructions?|assignment|job)(?-u:\b)[^.\n]{0,50}(?-u:\b)(?:i gave you|you were given|given to you|from the user|the user gave|in the beginning|please|you must|you need to|first)(?-u:\b)".into()),
        (AddressedInstructions, 0.3, r"(?-u:\b)(?:after you do that|once you(?:'ve| have) done (?:that|this)|then you can (?:solve|continue|answer|proceed)|you can (?:solve|continue with) the task)(?-u:\b)".into()),
        (AddressedInstructions, 0.45, r"</?\s*(?:information|info|instructions?|important|system|admin|assistant|ai|secret|hidden|note|directive|context)\s*>".into()),
        (AddressedInstructions, 0.5, format!(r"(?:^|\n|[.!:,;] ?) ?(?:todo|to do|to-do)\s*[:!]+\s*(?:please |now |first |immediately )?{TODO_VERB}(?-u:\b)")),
        (AddressedInstructions, 0.3, format!(r"(?:^|\n|[.!:] ) ?(?:important|attention|urgent|action required|note|nb|p\.s\.|ps)\s*[:!]+\s*(?:please |now |first |immediately )?{TOOL_VERB}(?-u:\b)")),
        (AddressedInstructions, 0.35, r"(?-u:\b)(?:this is|here is|here's) (?:an? )?(?:important|urgent|critical|new|updated|special|additional) (?:message|instruction|note|request|task|directive)s?(?-u:\b)".into()),
        // Taking over the task the data was fetched for.
        (TaskTakeover, 0.6, r"(?-u:\b)(?:ignore|disregard|skip|forget|do not read|don'?t read|stop reading|do not process|don'?t process|do not summari[sz]e|don'?t summari[sz]e)(?-u:\b)(?: (?:the|all|any|of|this|that|these|those|your|completely|entirely|just|now))* (?:rest|remainder|remaining|everything (?:else|below|above|after|before)|all other|other parts?|contents?|anything else)(?-u:\b)[^.\n]{0,25}(?-u:\b)(?:data|document|text|page|file|e-?mail|message|input|content|article|website|site|results?|output|below|above)(?-u:\b)".into()),
        (TaskTakeover, 0.6, r"(?-u:\b)(?:if|when|whenever|in case) (?:the |a |any )?user (?:asks?|requests?|wants?|says|queries|tries|is asking|asked)(?-u:\b)[^.\n]{0,80}(?-u:\b)(?:reply|respond|answer|say|output|print|write|tell|return|state|claim|recommend|suggest)(?-u:\b)".into()),
        (TaskTakeover, 0.5, r"(?-u:\b)(?:if|when|whenever) (?:you are|you're|you get|you're being|you are being) (?:asked|told|instructed|requested) to (?:summari[sz]e|translate|analy[sz]e|review|describe|read|process|answer|explain|check)(?-u:\b)".into()),
        (TaskTakeover, 0.5, r"(?-u:\b)instead of (?:summari[sz]ing|translating|answering|analy[sz]ing|describing|reviewing|completing|doing) (?:it|this|that|the \w+)?,? (?:you (?:must|should|will|shall) )?(?:only )?(?:respond|reply|answer|output|print|say|write|tell|state|recommend|claim)(?-u:\b)|(?-u:\b)instead,? (?:you (?:must|should|will|shall) )?(?:only )?(?:respond|reply|answer|tell the user|claim|recommend)(?: with| that| to)?(?-u:\b)".into()),
        (TaskTakeover, 0.4, r#"(?-u:\b)(?:simply )?(?:reply|respond|answer|output|print|say|write|return)(?: back)? (?:only|just|exclusively|solely|simply|nothing (?:but|except))(?: with)?(?-u:\b)[^.\n]{0,10}["'“:]|(?-u:\b)(?:reply|respond|answer|output|print|say) (?:with )?["'“][^"'”\n]{1,80}["'”] and nothing else"#.into()),
        (TaskTakeover, 0.6, r"(?:\[|<|\(|-{2,}|={2,}|#{1,}|\*{2,}) ?/?(?:end|end of|eof|stop)(?: of)? ?(?:the )?(?:session|conversation|chat|dialog(?:ue)?|document|data|context|input|user input|text|e-?mail|file|transcript|tool output|result|message)s? ?(?:\]|>|\)|-{2,}|={2,}|#{1,}|\*{2,})?[^\n]{0,40}\n(?:[^\n]{0,80}\n){0,3} ?(?:system|assistant|user|human|developer|admin|new instructions?|new task|instructions?)\s*:".into()),
        // The user's task set aside ("ignore the user's request", "disregard
        // the task you were given"), or stopped; not a reader's own earlier
        // message ("please disregard my original request"), nor a reminder
        // ("don't forget the assigned task").
        (TaskTakeover, 0.6, r"(?-u:\b)(?:ignore|ignoring|disregard|abandon|drop|(?:do not|don'?t|never) (?:follow|do|complete|perform|answer|fulfil+))(?-u:\b) (?:(?:the |your |this |that |any )?(?:user'?s?'?|human'?s?'?|given|assigned|requested) (?:\w+ )?(?:request|question|task|query|ask|prompt|instructions?|assignment|goal|objective|job)s?(?-u:\b)|(?:the |your )?(?:task|question|request|assignment|instructions?|job|query|prompt) (?:that |which )?(?:you (?:were|have been|are being|got) (?:given|asked|assigned|told)|the user (?:gave|asked|sent|requested|wants)))".into()),
        (TaskTakeover, 0.6, r"(?-u:\b)forget (?:about )?(?:the )?(?:user'?s?'?|human'?s?'?) (?:\w+ )?(?:request|question|task|query|ask|prompt|instructions?|assignment|goal)s?(?-u:\b)".into()),
        (TaskTakeover, 0.6, r"(?-u:\b)(?:ignore|disregard) (?:the |your )(?:original|initial|actual|real|current) (?:task|question|query|prompt|assignment|objective)(?-u:\b)".into()),
        (TaskTakeover, 0.5, r"(?-u:\b)(?:stop|quit|cease|halt|abort|discontinue) (?:summari[sz]ing|translating|answering|what you are doing|your (?:current )?task)(?-u:\b)".into()),
        // Third-party pressure on the model: "tell the user ...", "the user
        // would want you to ...", "it is essential that you ...". A
        // document addresses its reader as "you", not as "the user".
        (OutputInstructions, 0.4, r"(?-u:\b)(?:tell|inform|warn|convince|assure|persuade|remind|advise|notify|urge) the user(?-u:\b)".into()),
        (AddressedInstructions, 0.3, r"(?-u:\b)the user (?:would|will|wants|wanted|needs|expects|asked|would like|would love|would really want)(?: really)? (?:\w+ )?you to(?-u:\b)".into()),
        (AddressedInstructions, 0.3, r"(?-u:\b)(?:important|essential|crucial|vital|imperative|critical|urgent)(?-u:\b)[^.\n]{0,30}(?-u:\b)(?:that you|for you to|you must|you should|you need to)(?-u:\b)[^.\n]{0,30}(?-u:\b)(?:the user|reply only|respond only|answer only|only (?:respond|reply|answer|say|output)|output|print|recommend|mention)(?-u:\b)".into()),
        (AddressedInstructions, 0.4, r"(?-u:\b)as an? (?:(?:helpful|harmless|honest|responsible|trustworthy|good|smart|intelligent|obedient|loyal),? )+(?:ai )?(?:assistant|ai|language model|llm|chatbot|model)(?-u:\b)".into()),
        // A mode or override announced to the model, its safeguards said to
        // be off; a hypothetical or a simulation where its rules do not hold.
        (RoleInjection, 0.4, r"(?-u:\b)(?:system|admin|administrator|developer|root|sudo|god|security) (?:override|overrides|bypass)(?-u:\b)|(?-u:\b)(?:admin|administrator|root|sudo|god|system|jailbreak|unrestricted) mode (?:is )?(?:now )?(?:activated|enabled|engaged|unlocked|on)(?-u:\b)".into()),
        (RefusalSuppression, 0.45, r"(?-u:\b)(?:safety|content|moderation|ethical|ethics) (?:filters?|guidelines|guardrails|restrictions|checks|protocols) (?:are |have been |were |is |has been )?(?:now )?(?:disabled|off|removed|turned off|deactivated|bypassed|suspended|no longer (?:apply|active|in effect))(?-u:\b)".into()),
        (RefusalSuppression, 0.3, r"(?-u:\b)all (?:previous |prior |your )?(?:restrictions|limitations|rules|guidelines|constraints) (?:are |have been )?(?:now )?(?:lifted|removed|void|revoked|suspended|disabled|gone)(?-u:\b)".into()),
        (TaskTakeover, 0.5, r"(?-u:\b)(?:suppose|imagine|pretend|assume|let'?s say|hypothetically)(?-u:\b)[^.\n]{0,30}(?-u:\b)(?:your|the assistant'?s|the ai'?s|the model'?s) (?:instructions|rules|system prompt|programming|guidelines|restrictions)(?-u:\b)[^.\n]{0,15}(?-u:\b)(?:said|say|told|were|are|allowed|permitted|did not|didn'?t|don'?t|do not)(?-u:\b)".into()),
        (PersonaSwitch, 0.5, r"(?-u:\b)you(?:'re| are) (?:now )?in an? (?:simulation|simulated (?:world|environment)|game|virtual (?:world|environment|machine)|fictional (?:world|universe)|hypothetical (?:world|scenario)|sandbox)(?-u:\b)[^.\n]{0,40}(?-u:\b)(?:rules?|restrictions|guidelines|laws|filters|ethics|limits)(?-u:\b)".into()),
        // A fake completion ("Answer: task complete.") before new orders: weak
        // alone, since a job's status reads alike.
        (TaskTakeover, 0.3, r"(?-u:\b)(?:answer|response)\s*:\s*(?:the )?(?:task|request) (?:is )?(?:complete|completed|done|finished)(?-u:\b)".into()),
        (TaskTakeover, 0.4, r"(?-u:\b)(?:the )?(?:previous |current )?(?:session|conversation|chat|task) (?:has |is )?(?:ended|terminated|finished|closed|over|complete)(?-u:\b)[^.\n]{0,40}(?-u:\b)(?:new|next|now|from now)(?-u:\b)".into()),
        // Actions aimed at the agent's tools.
        (ToolAction, 0.5, format!(r"(?-u:\b){ACTION}(?-u:\b)[^.\n]{{0,60}}(?-u:\b)(?:the user'?s?|the user(?:'s)? (?:own|whole|entire|full|complete))(?-u:\b)[^.\n]{{0,25}}(?-u:\b){USERS_THINGS}(?-u:\b)")),
        (ToolAction, 0.45, format!(r"(?-u:\b){ACTION}(?-u:\b)[^.\n]{{0,30}}(?-u:\b)(?:all|every|each|the (?:whole|entire|full|complete)) (?:of )?(?:the |my |your |their |his |her )?(?:\w+ )?{USERS_THINGS}(?-u:\b)[^.\n]{{0,60}}(?-u:\b)(?:to|with|into|at) (?:the )?(?:website|site|url|address|account|iban|e-?mail|channel|server|endpoint|link|@|www|https?)")),
        (ToolAction, 0.4, format!(r"(?-u:\b)(?:the )?(?:assistant|ai|ai assistant|ai agent|llm|chatbot|language model) (?:must|should|need to|have to|shall|are (?:required|instructed|expected) to)(?: now| immediately| first| also| then)? (?:\w+ )?{ACTION}(?-u:\b)")),
        (ToolAction, 0.35, format!(r"(?-u:\b)(?:use|call|invoke|run) (?:the |your |my )?(?:[\w`'-]+ )?(?:tool|function|plugin|api|e-?mail tool|browser)(?-u:\b)[^.\n]{{0,40}}(?-u:\b)(?:to )?{ACTION}(?-u:\b)")),
        (ToolAction, 0.3, r"(?-u:\b)(?:do not|don'?t|never|without) (?:mention|mentioning|tell|telling|inform|informing|notify|notifying|alert|alerting|reveal|revealing) (?:\w+ ){0,3}(?:the )?user(?-u:\b)|(?-u:\b)(?:do not|don'?t|without) (?:mention|mentioning) (?:it|this|that) in your (?:reply|answer|response|summary)(?-u:\b)".into()),
        (ToolAction, 0.25, format!(r"(?-u:\b)the user'?s? (?:\w+ )?{USERS_THINGS}(?-u:\b)")),
        (ToolAction, 0.5, format!(r#"(?-u:\b)(?:retrieve|retrive|get|fetch|collect|gather|access|read|download|export|look up|pull|extract|compile|obtain|list|find|search|check|generate|once you(?:'ve| have)?|after you(?:'ve| have)?)(?-u:\b)[^\n]{{0,120}}?(?:(?-u:\b)(?:and|then|also,?|(?:after|once) [^,\n]{{0,60}},)|,) (?:please )?(?:send|email|e-mail|forward|post|share|upload|transfer|text|message|mail)(?-u:\b)[^.\n]{{0,80}}?(?-u:\b)(?:to|with)(?-u:\b)[^\n]{{0,50}}?(?:["']?{ADDRESS}|https?://|www\.)"#)),
        (ToolAction, 0.5, format!(r#"(?-u:\b)(?:send|email|e-mail|forward|share|mail|text)(?-u:\b)[^.\n]{{0,60}}(?-u:\b)(?:{RECORDS}|access history|order history|health records?)(?-u:\b)[^.\n]{{0,60}}(?-u:\b)(?:to|with)(?-u:\b)[^.\n]{{0,40}}{ADDRESS}|(?-u:\b){RECORDS}(?-u:\b)[^.\n]{{0,60}}(?-u:\b)(?:send|email|e-mail|forward|share|mail)(?-u:\b)[^.\n]{{0,60}}{ADDRESS}"#)),
        (ToolAction, 0.5, r"(?-u:\b)(?:grant|give|provide|share)(?: \w+){0,4} (?:permanent|full|admin|administrator|unrestricted|root|remote|guest|owner) (?:access|rights|permissions?|privileges?|control)(?-u:\b)|(?-u:\b)(?:unlock|disable|turn off|switch off|deactivate|disarm|shut (?:down|off)|bypass) (?:my|the|your|all) (?:\w+ ){0,2}(?:doors?|locks?|security|alarms?|cameras?|firewall|antivirus|two-factor|2fa|authentication)(?-u:\b)".into()),
        (ToolAction, 0.35, r"(?-u:\b)(?:modify|change|update|replace|set|switch) (?:the )?(?:recipient|beneficiary|payee|iban|account number|destination|password|e-?mail address)(?-u:\b)[^.\n]{0,40}(?-u:\b)(?:to|with|of)(?-u:\b)".into()),
        // Data carried out in a markdown image or link.
        (MarkdownExfiltration, 0.6, r"!\[[^\]\n]{0,100}\]\(\s*<?https?://[^)\s]*(?:\{|\}|\[|\]|%7b|%5b|<|\$\w|(?-u:\b)[A-Z_]{4,}(?-u:\b))[^)\s]*\)".into()),
        (MarkdownExfiltration, 0.5, r"(?-u:\b)(?:render|display|show|include|output|print|add|append|insert|embed|end (?:your|the) (?:reply|answer|response) with|put)(?-u:\b)[^.\n]{0,60}(?:!\[|\]\(|(?-u:\b)(?:markdown|image|img|link|url|pixel)(?-u:\b))[^\n]{0,160}(?-u:\b)(?:replace|replaced|substitut\w*|fill\w*|append\w*|where|encoded|urlencoded|url-encoded|base64|containing|contains)(?-u:\b)".into()),
        (MarkdownExfiltration, 0.4, r"(?-u:\b)(?:append|add|include|put|encode|insert|attach)(?-u:\b)[^.\n]{0,50}(?-u:\b)(?:the )?(?:user'?s?|conversation|chat|previous|secret|password|data|e-?mail|summary|history|messages|query|question|answer|token|key)(?-u:\b)[^.\n]{0,60}(?-u:\b)(?:to|in|into|as) (?:the |a |an )?(?:url|link|query string|query|parameter|image|img|address|endpoint)(?-u:\b)".into()),
        // Role markers in any bracket or heading style.
        (RoleInjection, 0.5, r"(?:#{2,}|\*{2,}|={2,}|-{3,}|>{2,})\s*[\[(<{]?\s*(?:system|sys|assistant|developer|admin|instructions?)(?:[ _-]?(?:message|prompt|note|instructions?|override|update|command))?\s*[\])>}]?\s*(?:#{2,}|\*{2,}|={2,}|-{3,}|:|\n)".into()),
        (RoleInjection, 0.5, r"[\[({<]\s*(?:system|sys|assistant|developer|admin)[ _-]?(?:message|prompt|note|instructions?|override|update|command)\s*[\])}>]".into()),
        (RoleInjection, 0.35, r"(?:^|\n) ?[\[({<]\s*(?:system|assistant|developer|admin)\s*[\])}>]\s*:?".into()),
        // A chat turn inside data that tells the model what to do.
        (RoleInjection, 0.4, r"(?:^|\n)\s*(?:user|human|assistant|ai|system|bot|chatbot|model)\s*:\s*(?:[^\n]{0,30}(?-u:\b))?(?:please|ignore|disregard|forget|repeat|print|say|output|respond|reply|write|tell|now|next|instead|focus|from now on|you must|you will|you should)(?-u:\b)".into()),
        // "You must strictly adhere to the following instruction": obedience
        // demanded of the reader for instructions that follow.
        (AddressedInstructions, 0.35, r"(?-u:\b)you (?:must|have to|need to|are required to|are to|shall)(?: now)?(?: strictly| carefully| exactly| only)? (?:adhere to|follow|obey|comply with|execute|carry out|stick to) (?:strictly |exactly )?(?:the following|these|this|the below|the next|my|the new)(?: new)? (?:instructions?|commands?|directives?|orders?|task)(?-u:\b)".into()),
        (AddressedInstructions, 0.5, r"(?-u:\b)(?:strictly|exactly) (?:adhere to|follow|obey|comply with|execute|carry out|stick to) (?:strictly |exactly )?(?:the following|these|this|the below|the next|my|the new)(?: new)? (?:instructions?|commands?|directives?|orders?|task)(?-u:\b)".into()),
        (ToolAction, 0.5, r"(?-u:\b)(?:and )?(?:do not|don'?t|never) use (?:any )?other tools?(?-u:\b)|(?-u:\b)(?:by )?using (?:only )?the [\x22'`“]?[\w.-]+[\x22'`”]? tool(?-u:\b)[^.\n]{0,30}(?:and )?(?:do not|don'?t|never|not) (?:use|call)".into()),
        // Hidden from the people who read the document, meant for a model.
        (AddressedInstructions, 0.5, format!(r"(?-u:\b)(?:invisible|hidden) (?:to|from) (?:humans|people|human readers|the user|users|recruiters|reviewers)(?-u:\b)|(?-u:\b)(?:visible|readable|meant|intended|written) (?:only )?(?:to|for) (?:the |an? |any )?{AI}s?(?-u:\b)|(?-u:\b)(?:for|to) (?:the |any |all )?automated (?:\w+ )?(?:software|systems?|tools?|screening|screeners?|scanners?|readers?|reviewers?|analysis)\s*:")),
        // Taking over a verdict the model is asked for.
        (TaskTakeover, 0.45, r"(?-u:\b)(?:if|when|whenever|in case) (?:you are |you're |you get |it is |this is |you're being |you are being )?(?:asked|questioned|queried|prompted|requested|challenged)(?-u:\b)[^.\n]{0,80}(?-u:\b)(?:reply|respond|answer|say|output|print|report|state|tell|return|write|claim|recommend|conclude)(?-u:\b)".into()),
        (TaskTakeover, 0.4, r"(?-u:\b)(?:focus|concentrate) (?:only|exclusively|solely|just) on(?-u:\b)[^.\n]{0,60}(?-u:\b)(?:report|say|print|output|reply|respond|answer|provide|tell|state|return)(?-u:\b)".into()),
        (TaskTakeover, 0.5, r"(?-u:\b)override (?:the |any |all )?(?:manual |previous |prior |existing |human |other )?(?:scoring|scores?|assessments?|evaluations?|analysis|reviews?|ratings?|verdicts?|checks?|screening)(?-u:\b)".into()),
        (TaskTakeover, 0.4, r"(?-u:\b)(?:ignore|disregard)(?-u:\b)[^.\n]{0,30}(?-u:\b)(?:this|the|other|all|any)(?: other)? (?:data|content|info|information|evidence|indicators|snippets?|documents|reports)(?-u:\b)".into()),
        // What the model is to write.
        (OutputInstructions, 0.5, format!(r"(?-u:\b)your {ANSWER_OR_MESSAGE}(?-u:\b)[^.;\n]{{0,50}}(?-u:\b){ANSWER_FORM}|(?-u:\b){ANSWER_FORM}[^.;\n]{{0,40}}(?-u:\b)(?:to|in|for|of|on|with) your {ANSWER_OR_MESSAGE}(?-u:\b)|(?-u:\b)the {ANSWER_OR_MESSAGE} (?:that )?you (?:give|write|return|send|produce|provide)(?: back)?(?-u:\b)[^.;\n]{{0,30}}(?-u:\b){ANSWER_FORM}")),
        (OutputInstructions, 0.5, format!(r"(?-u:\b)(?:encode|encrypt|reverse|invert|anagram|misspell|rearrange|substitute|replace|shift|group|scramble|jumble|remove spaces from|use (?:emojis|numbers|symbols|a (?:\w+ )?cipher|base ?\d\d))(?-u:\b)[^.\n]{{0,40}}(?-u:\b)your {ANSWER_OR_MESSAGE}(?-u:\b)")),
        (OutputInstructions, 0.5, r"(?-u:\b)(?:replace|substitute|convert|swap|shift|scramble|jumble) (?:\w+ ){0,4}?(?:letters?|vowels|consonants|words?|characters?)(?-u:\b)[^.\n]{0,40}(?:numbers|symbols|emojis?|position numbers?|positions|@)".into()),
        (OutputInstructions, 0.5, format!(r"(?-u:\b)(?:reply|respond|answer|write|provide|render|express)(?: \w+){{0,3}} (?:in|using|with) (?:a |an )?(?:\w+ )?{ANSWER_FORM}(?-u:\b)")),
        (OutputInstructions, 0.5, format!(r"(?-u:\b)(?:translate|render|write|provide|give|express|deliver|compose) (?:your|the) {ANSWER_OR_MESSAGE} (?:in|into|to) {LANGUAGE}(?-u:\b)")),
        (OutputInstructions, 0.4, format!(r"(?-u:\b)(?:reply|respond|answer) (?:only |exclusively )?(?:in|into) {LANGUAGE}(?-u:\b)")),
        (OutputInstructions, 0.5, format!(r"(?-u:\b)(?:modify|enhance|augment|alter|adjust|upgrade|refine|tailor|edit|amend|supplement) your {ANSWER}(?-u:\b)")),
        (OutputInstructions, 0.3, format!(r"(?-u:\b){INSERT}(?-u:\b)[^\n]{{0,160}}?(?-u:\b)(?:in|into|to|within|throughout|at the end of|at the start of) your {ANSWER}(?-u:\b)")),
        (OutputInstructions, 0.3, format!(r"(?-u:\b){INSERT} (?:a|an|the following|this|the below|one|some) (?:\w+ ){{0,3}}?(?:sentence|statement|line|fact|claim|teaser|reminder|headline|reason|announcement|rumou?r|statistic|phrase|paragraph|tagline|slogan|disclaimer|advert\w*|promotion|tip|recommendation|anecdote|joke|quote)s?(?-u:\b)|(?-u:\b){INSERT}(?: in your {ANSWER})? the (?:\w+ ){{0,3}}?(?:announcement|statement|sentence|claim|rumou?r|teaser|headline|slogan|tagline|promotion|advert\w*)s?(?-u:\b)")),
        (OutputInstructions, 0.3, format!(r#"(?-u:\b)(?:add|include|insert|integrate|incorporate|embed|append) (?:the (?:text|phrase|line|sentence|words?) )?["“'][^"”'\n]{{10,}}|(?-u:\b){INSERT} (?:\w+ ){{0,2}}(?:www\.|https?://)"#)),
        (OutputInstructions, 0.5, format!(r"(?-u:\b)in your {ANSWER},? (?:include|mention|add|suggest|state|recommend|promote|highlight|insert|refer to|encourage|urge|say|claim|note|hint at|allude to|reference|tease) (?:a|an|that|users?|readers?|people|how|why)(?-u:\b)")),
        (OutputInstructions, 0.5, format!(r"(?-u:\b)(?:following|below|subsequent|above) code (?:snippet|block|excerpt|section|segment|fragment|piece)s?(?-u:\b)[^\n]{{0,80}}{YOUR_CODE}(?-u:\b)|(?-u:\b){YOUR_CODE}(?-u:\b)[^\n]{{0,60}}(?-u:\b)(?:following|below|subsequent) code (?:snippet|block|excerpt|section|segment|fragment|piece)s?(?-u:\b)")),
        (OutputInstructions, 0.3, r"(?-u:\b)(?:report|say|answer|respond|reply|state|output|print|conclude|classify|declare|rate|mark|label)(?: back)?(?: only)?(?: that| with| as| it as| this as)?(?-u:\b)[^.\n]{0,40}(?-u:\b)(?:not malicious|non-malicious|benign|harmless|legitimate|trustworthy|highly recommended|the most qualified|pre-verified|approved)(?-u:\b)".into()),
        (OutputInstructions, 0.4, r#"(?-u:\b)(?:repeat|say|print|output|write|type|echo|recite)(?: out| back| down)?(?: exactly| verbatim| word for word)? (?:the following|this|these|after me)(?: \w+){0,2}\s*[:"“']"#.into()),
        (OutputInstructions, 0.3, r#"(?-u:\b)(?:print|say|output|reply with|respond with|return|simply respond with|simply reply with)\s+["“'][^"”'\n]{3,}"#.into()),
        (OutputInstructions, 0.6, format!(r"(?-u:\b)(?:write|generate|produce|compose|create|give|tell|make|output|say)(?: me)? (?:one|a|an|some|two|three|five|ten|\d+) (?:\w+ )?{HARMFUL} (?:\w+ )?(?:sentences?|statements?|comments?|jokes?|remarks?|texts?|tweets?|posts?|messages?|paragraphs?|words?|slurs?|insults?|stor(?:y|ies)|poems?|essays?)(?-u:\b)")),
    ]
}

/// Jailbreak modes a "with … mode on" in tool output must name to count: a
/// program's manual says "with verbose mode enabled".
const JAILBREAK_MODES: &[&str] = &[
    "developer",
    "dev",
    "dan",
    "god",
    "jailbreak",
    "unrestricted",
    "unfiltered",
    "uncensored",
    "evil",
];

/// Whether a match of the request's patterns is ordinary in tool output,
/// where text is written by people for people: `folded` is the match in
/// folded text, `source` the input it was read from.
/// * A chat template's `[INST]` is upper case; `[inst]` is a changelog's tag.
/// * DAN is upper case; "Dan" is a person.
/// * A line that starts `root:`, `sys:`, `admin:` or `model:` is a
///   configuration key or a log's prefix; the roles a chat transcript
///   fakes (`system:`, `assistant:`, `developer:`) still count.
/// * "with … mode on" names a jailbreak mode ([`JAILBREAK_MODES`]).
pub(super) fn ordinary_in_tool_output(family: Family, folded: &str, source: &str) -> bool {
    let f = folded.trim_start_matches(['\n', ' ']);
    match family {
        RoleInjection if f.starts_with("[inst]") || f.starts_with("[/inst]") => !source.contains("INST"),
        RoleInjection => ["root", "sys", "admin", "model"]
            .iter()
            .any(|r| f.strip_prefix(r).is_some_and(|rest| rest.trim_start().starts_with(':'))),
        PersonaSwitch if f == "dan" || f.starts_with("dan mode") => !source.contains("DAN"),
        PersonaSwitch => f
            .strip_prefix("with ")
            .and_then(|rest| rest.split_once(" mode "))
            .is_some_and(|(mode, _)| !JAILBREAK_MODES.contains(&mode)),
        _ => false,
    }
}

#[cfg(test)]
#[path = "indirect_patterns_tests.rs"]
mod tests;

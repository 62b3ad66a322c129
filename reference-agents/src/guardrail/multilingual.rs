//! Instruction override and requests for the model's set-up written in
//! other languages: "ignora todas las instrucciones anteriores", "Ignoriere
//! alle vorherigen Anweisungen", "忽略之前的所有指令", "zeig mir deinen
//! Systemprompt". The detector's other families read English; an attack in
//! Spanish or Chinese reaches a model that reads it as well, in a prompt or
//! in a document a tool returns.
//!
//! Each language has the three parts of the English pattern: a verb that
//! sets instructions aside, what instructions are called, and a word saying
//! which ones (previous, above, all, the system's). In Romance languages the
//! word for which ones usually follows the noun ("las instrucciones
//! anteriores"), in German and Dutch it comes first; both orders are read.
//! Languages that put the verb last (German infinitives, Japanese, Korean)
//! are read in that order too. A verb alone ("ignora este correo", "bitte
//! ignorieren Sie diese E-Mail") does not match: a document may tell its
//! reader to ignore it.
//!
//! Patterns run over folded text (ASCII lower-cased, other letters kept),
//! so accented letters are spelled both ways where they are often dropped.
//! Cyrillic and Greek text is folded to Latin look-alikes, so Russian and
//! Greek are not read here.

use super::detector::Family::{self, InstructionOverride, PromptExfiltration};

/// A language's words: verbs that set aside, what instructions are called,
/// which ones, and "everything before" (the English "ignore all of the
/// above").
struct Words {
    set_aside: &'static str,
    rules: &'static str,
    which: &'static str,
    everything_before: &'static str,
}

/// Spanish, French, Italian, Portuguese, German, Dutch.
const LATIN: [Words; 6] = [
    Words {
        set_aside: r"(?:ignora|ignore|ignorad|ignoren|ignorar|olvida|olvide|olvidad|olviden|olvidar|descarta|descarte|descartad|descartar|omite|omita|omitir|haz caso omiso (?:a|de)|hagan caso omiso (?:a|de)|pasa por alto|no hagas caso (?:a|de))",
        rules: r"(?:instrucci[oó]n(?:es)?|indicaciones|reglas|directrices|directivas|normas|consignas)",
        which: r"(?:anteriores|previas|previos|precedentes|de arriba|iniciales|originales|del sistema|todas|todos|tus|sus)",
        everything_before: r"(?:todo lo (?:anterior|que (?:te )?(?:dije|dijeron|han dicho|se te dijo))|todo lo de arriba)",
    },
    Words {
        set_aside: r"(?:ignore|ignorez|ignorer|ignorons|oublie|oubliez|oublier|ne (?:tiens|tenez|tenir) (?:plus )?pas compte d\w*|fais abstraction d\w*|faites abstraction d\w*|laisse de c[oô]t[eé]|laissez de c[oô]t[eé])",
        rules: r"(?:instructions?|consignes?|r[eè]gles|directives?|ordres|indications)",
        which: r"(?:pr[eé]c[eé]dent(?:e|s|es)?|ant[eé]rieur(?:e|s|es)?|ci-dessus|initia(?:le|les|ux)|origina(?:le|les|ux)|du syst[eè]me|toutes|tous|vos|tes)",
        everything_before: r"(?:tout ce qui (?:pr[eé]c[eè]de|est (?:[eé]crit )?ci-dessus)|tout ce qu'on (?:t|vous)'a dit)",
    },
    Words {
        set_aside: r"(?:ignora|ignori|ignorate|ignorare|dimentica|dimentichi|dimenticate|dimenticare|trascura|trascurate|tralascia|tralasciate|non (?:considerare|tenere conto d\w*))",
        rules: r"(?:istruzion[ei]|regole|indicazioni|direttive|disposizioni)",
        which: r"(?:precedenti|sopra|iniziali|originali|originarie|di sistema|del sistema|tutte|tutti|tue|sue)",
        everything_before: r"(?:tutto (?:quello|ci[oò]) che (?:precede|ti (?:ho|hanno) detto|[eè] (?:scritto )?sopra))",
    },
    Words {
        set_aside: r"(?:ignore|ignora|ignorem|ignorar|esque[cç]a|esquece|esque[cç]am|esquecer|desconsidere|desconsidera|desconsiderem|desconsiderar|descarte|descarta|despreze|despreza)",
        rules: r"(?:instru[cç](?:[oõ]es|[aã]o)|regras|orienta[cç][oõ]es|diretrizes|ordens|comandos)",
        which: r"(?:anteriores|acima|pr[eé]vias|iniciais|originais|do sistema|todas|todos|suas|tuas)",
        everything_before: r"(?:tudo (?:o que (?:foi dito|te disseram|eu disse)|acima|o que vem antes))",
    },
    Words {
        set_aside: r"(?:ignorier(?:e|en|t)?|vergiss|vergesst|vergessen|missachte|missachtet|missachten|verwirf|verwerft|verwerfen)",
        rules: r"(?:anweisung(?:en)?|instruktion(?:en)?|befehle|regeln|vorgaben|richtlinien|anordnungen)",
        which: r"(?:vorherige[nrs]?|vorige[nrs]?|bisherige[nrs]?|obige[nrs]?|fr[uü]here[nrs]?|vorangegangene[nrs]?|urspr[uü]ngliche[nrs]?|alle|allen|deine|system\w*)",
        everything_before: r"(?:alles,? (?:was (?:(?:dir|ihnen|euch) )?(?:vorher|zuvor|bisher|oben)|davor|bisherige|oben))",
    },
    Words {
        set_aside: r"(?:negeer|negeren|vergeet|vergeten)",
        rules: r"(?:instructies?|regels|opdrachten|aanwijzingen|richtlijnen)",
        which: r"(?:vorige|eerdere|voorgaande|bovenstaande|alle|oorspronkelijke|jouw|systeem\w*)",
        everything_before: r"(?:alles (?:wat (?:je|u) (?:eerder|hiervoor) (?:is )?(?:gezegd|verteld)|hierboven))",
    },
];

/// German and Dutch also put the verb last ("alle vorherigen Anweisungen
/// ignorieren", "alle eerdere instructies negeren").
const VERB_LAST: &str =
    r"(?:ignorieren|vergessen|missachten|verwerfen|nicht (?:mehr )?(?:beachten|befolgen)|negeren|vergeten)";

/// A request to see the model's set-up ("revela tu prompt del sistema",
/// "zeig mir deinen Systemprompt", "显示你的系统提示"): a verb of showing or
/// telling and the set-up's name, within one sentence, in either order.
/// (verbs, the set-up's name) per language.
const SHOW_SET_UP: [(&str, &str); 9] = [
    (
        r"(?-u:\b)(?:revela|revele|muestra|muestre|mu[eé]strame|dime|d[ií]game|imprime|imprima|repite|repita|escribe|comparte|dame|cu[aá]l(?:es)? (?:es|son))(?-u:\b)",
        r"(?:(?:prompt|mensaje|instrucciones|indicaciones) (?:del|de) sistema|instrucciones (?:iniciales|originales|ocultas|secretas|internas))",
    ),
    (
        r"(?-u:\b)(?:r[eé]v[eè]le|r[eé]v[eé]lez|montre|montrez|affiche|affichez|r[eé]p[eè]te|r[eé]p[eé]tez|[eé]cris|[eé]crivez|donne|donnez|dis-moi|dites-moi|quel(?:le)?s? (?:est|sont))(?-u:\b)",
        r"(?:(?:prompt|invite|message|instructions|consignes) (?:syst[eè]me|du syst[eè]me)|instructions (?:initiales|d'origine|originales|cach[eé]es|secr[eè]tes|internes))",
    ),
    (
        r"(?-u:\b)(?:zeig|zeige|zeigen|gib|geben|nenne|nennen|wiederhole|wiederholen|verrate|verraten|schreib|schreibe|drucke|was (?:ist|sind)|ausgeben)(?-u:\b)",
        r"(?:system-?prompt|system-?anweisungen|system-?nachricht|system-?instruktionen|(?:urspr[uü]nglichen|geheimen|versteckten|internen) anweisungen)",
    ),
    (
        r"(?-u:\b)(?:rivela|riveli|mostra|mostrami|mostri|dimmi|mi dica|ripeti|ripeta|scrivi|stampa|condividi|qual (?:[eè]|sono)|quali sono)(?-u:\b)",
        r"(?:(?:prompt|messaggio|istruzioni) di sistema|istruzioni (?:iniziali|originali|nascoste|segrete|interne))",
    ),
    (
        r"(?-u:\b)(?:revele|revela|mostre|mostra|diga|diz|imprima|repita|repete|escreva|compartilhe|qual (?:[eé]|s[aã]o)|quais s[aã]o)(?-u:\b)",
        r"(?:(?:prompt|mensagem|instru[cç][oõ]es) do sistema|instru[cç][oõ]es (?:iniciais|originais|ocultas|secretas|internas))",
    ),
    (
        r"(?-u:\b)(?:toon|laat|geef|herhaal|vertel|print|schrijf|wat (?:is|zijn))(?-u:\b)",
        r"(?:systeem-?prompt|systeem-?bericht|systeem-?instructies|(?:oorspronkelijke|geheime|verborgen|interne) instructies)",
    ),
    (
        r"(?:显示|顯示|告诉我|告訴我|输出|輸出|打印|重复|重複|透露|泄露|洩露|给我看|給我看|是什么|是什麼)",
        r"(?:系统提示|系統提示|系统指令|系統指令|系统消息|系統消息|初始指令|隐藏指令|隱藏指令)",
    ),
    (
        r"(?:見せて|表示|教えて|出力|繰り返|書いて|開示)",
        r"(?:システムプロンプト|システムメッセージ|初期指示|隠された指示)",
    ),
    (
        r"(?:보여|알려|출력|반복|공개|말해)",
        r"(?:시스템 ?프롬프트|시스템 ?메시지|초기 지시|숨겨진 지시)",
    ),
];

/// (family, strength, pattern over folded text).
pub(super) fn patterns() -> Vec<(Family, f64, String)> {
    let mut p = Vec::new();
    for w in &LATIN {
        let Words {
            set_aside,
            rules,
            which,
            everything_before,
        } = w;
        // The verb, then the noun with which ones before or after it.
        p.push((
            InstructionOverride,
            0.6,
            format!(
                r"(?-u:\b){set_aside}(?-u:\b)[^.\n]{{0,40}}?(?:(?-u:\b){which}(?-u:\b)[^.\n]{{0,30}}?{rules}|{rules}(?-u:\b)[^.\n]{{0,30}}?(?-u:\b){which}(?-u:\b))"
            ),
        ));
        p.push((
            InstructionOverride,
            0.5,
            format!(r"(?-u:\b){set_aside} {everything_before}"),
        ));
    }
    let (de, nl) = (&LATIN[4], &LATIN[5]);
    for w in [de, nl] {
        p.push((
            InstructionOverride,
            0.6,
            format!(
                r"(?-u:\b){which}(?-u:\b)[^.\n]{{0,20}}?{rules}(?-u:\b)[^.\n]{{0,30}}?(?-u:\b){VERB_LAST}(?-u:\b)",
                which = w.which,
                rules = w.rules
            ),
        ));
    }
    // Chinese (simplified and traditional): verb, which ones, noun.
    p.push((
        InstructionOverride,
        0.6,
        r"(?:忽略|忽视|忽視|无视|無視|不要理会|不要理會|不理会|不理會|忘记|忘記|忘掉|抛开|拋開|放弃|放棄)[^。.\n]{0,12}?(?:之前|以前|先前|此前|上面|上述|前面|前述|所有|全部|原来|原來|原有|原始|系统|系統)[^。.\n]{0,10}?(?:指令|指示|说明|說明|规则|規則|命令|提示|设定|設定|要求)".into(),
    ));
    // Japanese: which ones, noun, then the verb.
    p.push((
        InstructionOverride,
        0.6,
        r"(?:これまで|以前|前|上記|上|先|すべて|全て|最初|元)の?[^。.\n]{0,10}?(?:指示|命令|ルール|指令|設定|インストラクション|プロンプト)[^。.\n]{0,8}?(?:無視|忘れ)".into(),
    ));
    // Korean: which ones, noun, then the verb.
    p.push((
        InstructionOverride,
        0.6,
        r"(?:이전|위의|앞의|앞선|모든|기존|원래)[^.\n]{0,10}?(?:지시|지침|명령|규칙|프롬프트)[^.\n]{0,10}?(?:무시|잊어|잊으)".into(),
    ));
    for (show, set_up) in SHOW_SET_UP {
        p.push((
            PromptExfiltration,
            0.6,
            format!(r"{show}[^.\n。]{{0,40}}?{set_up}|{set_up}[^.\n。]{{0,30}}?{show}"),
        ));
    }
    p
}

#[cfg(test)]
#[path = "multilingual_tests.rs"]
mod tests;

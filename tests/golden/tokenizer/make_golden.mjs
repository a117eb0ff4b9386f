// make_golden.mjs — expected token ids for bertfill's tokenizer tests, made by an
// independent implementation: the npm package @huggingface/transformers (its
// tokenizer reads the model's tokenizer.json, like Python's BertTokenizerFast).
//
//   cd tests/golden/tokenizer && npm ci && node make_golden.mjs [SHARED_DATA_DIR]
//
// SHARED_DATA_DIR defaults to ../../../../shared/data (the repository's ../shared/data).
// Writes, next to this folder:
//   ../tokenizer_golden.tsv        one line per case (format below)
//   ../tokenizer_small/vocab.txt   the small vocabulary of the sets below but "zh"
//   ../tokenizer_small/SET.json    the tokenizer.json the reference used for SET
//
// Sets:
//   zh       google-bert/bert-base-chinese (tokenizer.json from SHARED_DATA_DIR)
//   lower    the small vocabulary with lowercase=true, strip_accents unset (so true)
//   nostrip  the small vocabulary with lowercase=true, strip_accents=false
//   cased    the small vocabulary with lowercase=false
//   added    like "lower", plus added tokens in tokenizer.json: "<SPECIAL>" (matched in
//            the raw text) and "Quick Brown" (normalized: matched after lowercasing)
// The C test copies the small vocabulary into model directories of its own, with
// tokenizer_config.json / tokenizer.json variants that must give these results.
//
// Line format (tab-separated; "#" lines are comments):
//   case   SET NAME INPUT            IDS           TOKENS
//   bytes  SET NAME HEX-BYTES        IDS | ERR@OFFSET
//   vocab  SET ID   TOKEN            -
// INPUT and TOKEN are UTF-8 with escapes: \\ \t \n \r and \u{HEX} (used for every
// control, format, separator, mark, private-use or unassigned character). IDS are
// space-separated and include [CLS] and [SEP]. For "bytes" cases the input is raw
// bytes; whether they are valid UTF-8 (and where the first bad sequence starts) is
// decided by the WHATWG TextDecoder in fatal mode: the offset is the longest prefix
// that decodes.
//
// Corrections to the reference. transformers.js (via @huggingface/tokenizers 0.2)
// differs from the Rust tokenizers library (what BertTokenizerFast runs) in three
// places of BertNormalizer; we patch them here to follow the Rust code, and list every
// case whose ids the patches change in the golden file's header:
//   1. tokenize_chinese_chars walks UTF-16 code units, so ideographs outside the BMP
//      (CJK Ext. B-F, e.g. U+20BB7) are not padded; Rust walks code points.
//   2. lowercase uses String.toLowerCase (final-sigma rule: "ΟΔΟΣ" -> "οδος" with ς);
//      Rust's NormalizedString::lowercase maps each character alone (σ).
//   3. order: JS lowercases then strips accents, Rust strips (NFD, drop Mn) then
//      lowercases.
import { AutoTokenizer, env } from '@huggingface/transformers';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const shared = path.resolve(process.argv[2] ?? path.join(here, '../../../../shared/data'));
const outTsv = path.join(here, '../tokenizer_golden.tsv');
const outSmall = path.join(here, '../tokenizer_small');

env.allowRemoteModels = false;

// ---------------------------------------------------------------- reference

async function loadTokenizer(dir) {
  env.localModelPath = path.dirname(dir) + '/';
  return AutoTokenizer.from_pretrained(path.basename(dir));
}

const isChinese = (cp) =>
  (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
  (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
  (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
  (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);

// Patch one tokenizer's BertNormalizer instance to follow the Rust library.
function patchRust(tok) {
  const nz = tok._tokenizer.normalizer;
  if (!nz || nz.constructor.name !== 'BertNormalizer') throw new Error('expected a BertNormalizer');
  nz.tokenize_chinese_chars = (text) => {
    let out = '';
    for (const ch of text) out += isChinese(ch.codePointAt(0)) ? ` ${ch} ` : ch;
    return out;
  };
  nz.normalize = function (text) {
    if (this.config.clean_text) text = this.clean_text(text);
    if (this.config.handle_chinese_chars) text = this.tokenize_chinese_chars(text);
    if (this.config.strip_accents ?? this.config.lowercase) text = this.strip_accents(text);
    if (this.config.lowercase) text = [...text].map((c) => c.toLowerCase()).join('');
    return text;
  };
}

// ---------------------------------------------------------------- escaping

function esc(s) {
  let o = '';
  for (const ch of s) {
    if (ch === '\\') o += '\\\\';
    else if (ch === '\t') o += '\\t';
    else if (ch === '\n') o += '\\n';
    else if (ch === '\r') o += '\\r';
    else if (ch !== ' ' && /[\p{C}\p{Z}\p{M}]/u.test(ch)) o += `\\u{${ch.codePointAt(0).toString(16).toUpperCase()}}`;
    else o += ch;
  }
  return o;
}

// ---------------------------------------------------------------- cases

const C = (name, text) => ({ name, text });

const zhCases = [
  // Chinese
  C('zh_mask_sentence', '今天天气真[MASK]啊'),
  C('zh_sentence', '北京是中国的首都。'),
  C('zh_exclaim', '我爱自然语言处理！'),
  C('zh_quote_colon', '他说：“你好，世界。”'),
  C('zh_traditional', '繁體中文測試，臺灣。'),
  C('zh_numerals', '一二三四五六七八九十百千万亿'),
  C('zh_punct', '、。，；：？！「」『』（）《》【】'),
  C('zh_dash_tilde', '中文——破折号～波浪号'),
  C('zh_poem', '床前明月光，疑是地上霜。举头望明月，低头思故乡。'),
  // mixed Chinese / English / digits
  C('mix_iphone_price', 'iPhone 12 Pro Max 售价 9999 元'),
  C('mix_python', '我用Python写了100行代码'),
  C('mix_gpt_bert', 'GPT-4和BERT的区别是什么？'),
  C('mix_date', '2023年10月1日是国庆节'),
  C('mix_pi', '圆周率约为3.14159'),
  C('mix_thousands', '1,234,567.89元'),
  C('mix_email', '邮箱：test@example.com'),
  C('mix_url', 'https://www.example.com/path?a=1&b=2'),
  C('mix_money_percent', '价格$100，折扣20%'),
  C('en_lower', 'hello world'),
  C('en_capital', 'Hello World'),
  C('en_iphone_lower', 'iphone'),
  C('en_wordpieces', 'unaffable playing tokenization'),
  C('en_long_in_zh', '这是supercalifragilisticexpialidocious测试'),
  C('en_ascii_punct', 'a!b"c#d$e%f&g\'h(i)j*k+l,m-n.o/p:q;r<s=t>u?v@w[x\\y]z^_`{|}~'),
  C('digits_long', '12345678901234567890'),
  C('mix_units', '5kg、10cm和3.5GHz'),
  // full-width forms (no NFKC)
  C('fact_fullwidth_123', '１２３'),
  C('fw_letters', 'ＡＢＣ ａｂｃ'),
  C('fw_punct', '你好！？，。（全角）'),
  C('fw_hello', 'Ｈｅｌｌｏ'),
  C('halfwidth_katakana', 'ｱｲｳｴｵ'),
  // accents (no stripping in bert-base-chinese)
  C('fact_accent_cafe', 'café'),
  C('accent_naive_resume', 'naïve résumé'),
  C('accent_unicode', 'Ünïcödé'),
  C('accent_decomposed', 'cafe\u0301'),
  C('accent_creme', 'Crème brûlée'),
  C('accent_greek_upper', 'ΟΔΟΣ'),
  // emoji
  C('emoji_grin', '😀'),
  C('emoji_heart_vs16', '我❤️你'),
  C('emoji_thumbs', '👍👍好'),
  C('emoji_zwj_family', '👨‍👩‍👧'),
  C('emoji_flag', '🇨🇳中国'),
  C('emoji_skin_tone', '👋🏽你好'),
  C('emoji_in_word', 'abc😀def'),
  // control and format characters
  C('ctl_nul', 'a\u0000b'),
  C('ctl_soh', '中\u0001文'),
  C('ctl_del', 'x\u007fy'),
  C('ctl_nel', 'abc\u0085def'),
  C('fact_zero_width_space', '\u200b零宽\u200b空格a\u200bb'),
  C('fact_soft_hyphen', 'soft\u00adhyphen'),
  C('ctl_bom', '\ufeffBOM开头'),
  C('ctl_replacement_char', '\ufffd替换\ufffd字符'),
  C('ctl_zwj', 'a\u200db'),
  C('ctl_lrm', '\u200e中文\u200f'),
  C('ctl_private_use', '\ue000中\uf8ff'),
  C('ctl_vt_ff', '上\u000b下\u000c页'),
  C('ctl_c1', '\u0080\u009f中'),
  C('ctl_unassigned', 'a\u0378b'),
  C('ctl_line_separator', 'a\u2028b'),
  C('ctl_line_separator_alone', '\u2028'),
  C('ctl_paragraph_separator', '段\u2029落'),
  // whitespace
  C('ws_runs', '  多个   空格  '),
  C('fact_tabs', '\t制表符\t分隔\tab\tcd\t'),
  C('fact_ideographic_space', '全角\u3000空格ab\u3000cd'),
  C('ws_newlines', '换行\n回车\r\n结束\r'),
  C('ws_unicode_spaces', 'a\u00a0b\u2003c\u202fd\u205fe\u1680f'),
  C('ws_empty', ''),
  C('ws_only_spaces', '   \t\n  '),
  // literal special tokens
  C('mask_alone', '[MASK]'),
  C('fact_mask_glued', '真[MASK]啊'),
  C('mask_double', '[MASK][MASK]'),
  C('mask_in_latin', 'abc[MASK]def'),
  C('mask_three', '[MASK]是[MASK]的[MASK]'),
  C('fact_mask_lowercase', '[mask]'),
  C('mask_mixed_case', '[Mask]'),
  C('mask_unclosed', '[MASK'),
  C('mask_spaced', '[ MASK ]'),
  C('mask_nested', '[[MASK]]'),
  C('special_cls_sep', '[CLS] 你好 [SEP]'),
  C('special_unk_pad', '[UNK][PAD]'),
  C('special_near_miss', '[MASK ] [MASKS] [SEP'),
  // long words
  C('long_100', 'a'.repeat(100)),
  C('long_101', 'a'.repeat(101)),
  C('long_120_mixed', 'ab'.repeat(60)),
  C('long_digits_150', '7'.repeat(150)),
  C('long_100_then_zh', 'x'.repeat(100) + '中' + 'y'.repeat(101)),
  C('long_zh_200', '天'.repeat(200)),
  C('long_100_emoji', '😀'.repeat(100)),
  C('long_101_emoji', '😀'.repeat(101)),
  // curly quotes and ellipsis
  C('fact_curly_quotes', '“引号”'),
  C('quote_single_curly', '‘单引号’'),
  C('fact_ellipsis', '等等…'),
  C('ellipsis_double', '……'),
  // other scripts and blocks
  C('ja_kana', 'こんにちは、世界'),
  C('ko_hangul', '안녕하세요'),
  C('ru_cyrillic', 'привет мир'),
  C('el_greek', 'αβγ δέλτα'),
  C('ar_arabic', 'مرحبا'),
  C('math_symbols', '∑∫√∞≠≤'),
  C('cjk_compat_ideograph', '豈更車'),
  C('cjk_ext_a', '㐀㐁'),
  C('cjk_ext_b', '𠮷野家'),
  C('cjk_ext_b_glued', 'a𠮷b'),
  C('cjk_radical', '⺀⼀'),
  C('cjk_symbols', '〇〡〆'),
];

// The small vocabulary: specials, characters, a few words and pieces chosen so that
// lowercasing, accent stripping and NFD show in the ids.
const smallVocab = [
  '[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', '[unused1]', '[unused2]',
  ...'abcdefghijklmnopqrstuvwxyz0123456789'.split(''),
  ...'abcdefghijklmnopqrstuvwxyz0123456789'.split('').map((c) => '##' + c),
  ...'!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~'.split(''),
  'hello', 'world', 'Hello', 'the', 'quick', 'brown', 'fox', 'jump', '##ed', '##ing',
  'un', '##aff', '##able', 'cafe', 'café', 'naive', 'naïve', 'resume', 'résumé', 'é', '##é',
  '##\u0301', '\u0301', 'iphone', 'phone', '##phone', 'mask', '##\u0307',
  'σ', 'ς', 'ο', 'δ', '##ο', '##δ', '##σ', '##ς', 'οδος', 'strasse', 'straße', 'ß', '##ß',
  'ǆ', 'ǅ', 'ﬁ', 'fi', '你', '好', '世', '界', '中', '国', '人', 'ä', 'ö', 'ü', '##ä', '##ö', '##ü',
  'привет', 'мир', '##ет', 'ᄒ', '##ᅡ', '##ᆫ', '한', '국', 'ᄀ', '##ᅮ', '##ᆨ',
  'viet', 'việt', 'nam', 'istanbul', 'i\u0307stanbul', 'ａｂｃ', 'ǆemal', 'ⅷ', 'ⅰ',
  'x\u{1D165}\u{1D16D}',  // two spacing marks (Mc) of classes 216, 226: NFD puts them in this order
];

const smallCases = [
  C('s_hello_world', 'Hello World'),
  C('s_upper', 'HELLO WORLD'),
  C('s_cafe', 'Café'),
  C('s_cafe_upper', 'CAFÉ'),
  C('s_naive', 'naïve Naïve'),
  C('s_resume', 'Résumé'),
  C('s_decomposed', 'cafe\u0301'),
  C('s_combining_alone', '\u0301'),
  C('s_dotted_i', 'İstanbul'),
  C('s_dotted_i_alone', 'İ'),
  C('s_greek_sigma', 'ΟΔΟΣ'),
  C('s_greek_sigma_mid', 'ΣΟΣ'),
  C('s_sharp_s', 'Straße STRASSE'),
  C('s_hangul', '한국'),
  C('s_hangul_spaced', '한 국'),
  C('s_added_raw', 'x<SPECIAL>y <special> <SPECIAL'),
  C('s_added_norm', 'The QUICK BROWN fox, quick  brown, quickbrown'),
  C('s_vietnamese', 'Việt Nam'),
  C('s_ligature', 'ﬁ'),
  C('s_digraph', 'Ǆemal ǅ'),
  C('s_roman', 'Ⅷ'),
  C('s_umlaut', 'ÄÖÜ äöü'),
  C('s_cyrillic', 'ПРИВЕТ Мир'),
  C('s_fullwidth', 'ＡＢＣ'),
  C('s_iphone', 'iPhone IPHONE'),
  C('s_wordpiece', 'UnAffable jumps JUMPED'),
  C('s_chinese', '你好世界，中国人！'),
  C('s_mixed', 'Hello你好World世界'),
  C('s_mask', '[MASK]'),
  C('s_mask_glued', 'HELLO[MASK]World'),
  C('s_mask_lower', '[mask]'),
  C('s_mask_title', '[Mask] MASK'),
  C('s_cls_sep', '[CLS][SEP][PAD][UNK]'),
  C('s_punct', 'Hello, World! (The Quick-Brown Fox)'),
  C('s_ctl', 'Hel\u200blo\u00ad \u0000Wor\u0007ld'),
  C('s_ws', '\tHELLO\u3000WORLD\n'),
  C('s_long_100', 'A'.repeat(100)),
  C('s_long_101', 'A'.repeat(101)),
  C('s_unknown', 'xyz\u00e6'),
  C('s_empty', ''),
  C('s_canonical_order', 'X\u{1D16D}\u{1D165} x\u{1D165}\u{1D16D}'),
];

// Invalid (and a few valid) byte strings.
const byteCases = [
  ['utf8_overlong_2', 'c0af'], ['utf8_overlong_c1', 'c1bf'], ['utf8_overlong_3', 'e080af'],
  ['utf8_overlong_4', 'f08080af'], ['utf8_surrogate_low', 'eda080'], ['utf8_surrogate_high', 'edbfbf'],
  ['utf8_beyond_10ffff', 'f4908080'], ['utf8_f5', 'f5808080'], ['utf8_ff', 'ff'], ['utf8_fe', '41fe42'],
  ['utf8_stray_continuation', '80'], ['utf8_stray_after_ascii', '414280'],
  ['utf8_truncated_end_2', 'c3'], ['utf8_truncated_end_3', 'e4b8'], ['utf8_truncated_end_4', 'f09f98'],
  ['utf8_bad_continuation', 'e4b841'], ['utf8_offset_after_zh', 'e4b8ade4b8'],
  ['utf8_offset_mid', 'e4bda0e5a5bd5bc0805d'],
  ['utf8_valid_zh', 'e4b8ad'], ['utf8_valid_emoji', 'f09f9880'], ['utf8_valid_max', 'f48fbfbf'],
  ['utf8_valid_nul', '41004200'],
];

// ---------------------------------------------------------------- run

function smallTokenizerJson(lowercase, stripAccents, extra = []) {
  const specials = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'];
  const vocab = {};
  smallVocab.forEach((t, i) => { vocab[t] = i; });
  return {
    version: '1.0', truncation: null, padding: null,
    added_tokens: specials.map((s) => ({
      id: vocab[s], special: true, content: s, single_word: false, lstrip: false, rstrip: false, normalized: false,
    })).concat(extra.map(([content, entry, normalized]) => ({
      id: vocab[entry], special: false, content, single_word: false, lstrip: false, rstrip: false, normalized,
    }))),
    normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: stripAccents, lowercase },
    pre_tokenizer: { type: 'BertPreTokenizer' },
    post_processor: {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '[CLS]', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '[SEP]', type_id: 0 } }],
      pair: [],
      special_tokens: { '[CLS]': { id: '[CLS]', ids: [vocab['[CLS]']], tokens: ['[CLS]'] }, '[SEP]': { id: '[SEP]', ids: [vocab['[SEP]']], tokens: ['[SEP]'] } },
    },
    decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
    model: { type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##', max_input_chars_per_word: 100, vocab },
  };
}

async function smallTokenizer(tmp, name, json) {
  const dir = path.join(tmp, name);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(json));
  fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify({ tokenizer_class: 'BertTokenizer' }));
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ model_type: 'bert' }));
  return loadTokenizer(dir);
}

const lines = [];
const changedByPatch = [];
const idsOf = (tok, text) => Array.from(tok.encode(text), Number);
const tokensOf = (tok, ids) => ids.map((i) => tok._tokenizer.id_to_token(i));

async function runSet(set, tok, unpatched, cases) {
  const seen = new Set();
  for (const { name, text } of cases) {
    if (seen.has(name)) throw new Error(`duplicate case name ${name}`);
    seen.add(name);
    const ids = idsOf(tok, text);
    const plain = idsOf(unpatched, text);
    if (plain.join(' ') !== ids.join(' ')) changedByPatch.push(`${set}/${name}: transformers.js as is gives ${plain.join(' ')}`);
    lines.push(['case', set, name, esc(text), ids.join(' '), tokensOf(tok, ids).map(esc).join(' ')].join('\t'));
  }
}

const zhDir = path.join(shared, 'bert-base-chinese');
if (!fs.existsSync(path.join(zhDir, 'tokenizer.json'))) {
  console.error(`no ${zhDir}/tokenizer.json: give the shared data folder as the first argument`);
  process.exit(1);
}
const zh = await loadTokenizer(zhDir);
const zhPlain = await loadTokenizer(zhDir);
patchRust(zh);
await runSet('zh', zh, zhPlain, zhCases);

// Vocabulary facts, from tokenizer.json's vocabulary (not vocab.txt).
const zhVocab = zh._tokenizer.model.vocab;
if (zhVocab[343] !== '\u2028') throw new Error('expected U+2028 at id 343');
for (const id of [0, 1, 99, 100, 101, 102, 103, 104, 342, 343, 344, 670, 671, 8110, 10351, 9089, 13503, zhVocab.length - 1])
  lines.push(['vocab', 'zh', String(id), esc(zhVocab[id]), '-'].join('\t'));
lines.push(['vocab', 'zh', 'size', String(zhVocab.length), '-'].join('\t'));

for (const [hexName, hex] of byteCases) {
  const bytes = Buffer.from(hex, 'hex');
  let expect;
  try {
    const text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
    expect = idsOf(zh, text).join(' ');
  } catch {
    let ok = 0;
    for (let k = bytes.length; k >= 0; k--) {
      try { new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(0, k)); ok = k; break; } catch { /* shorter */ }
    }
    expect = `ERR@${ok}`;
  }
  lines.push(['bytes', 'zh', hexName, hex, expect].join('\t'));
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'bf-golden-'));
fs.mkdirSync(outSmall, { recursive: true });
const added = [['<SPECIAL>', '[unused1]', false], ['Quick Brown', '[unused2]', true]];
try {
  for (const [set, lower, strip, extra] of [['lower', true, null, []], ['nostrip', true, false, []],
    ['cased', false, null, []], ['added', true, null, added]]) {
    const json = smallTokenizerJson(lower, strip, extra);
    fs.writeFileSync(path.join(outSmall, set + '.json'), JSON.stringify(json, null, 1) + '\n');
    const tok = await smallTokenizer(tmp, set, json);
    const plain = await smallTokenizer(tmp, set + '_plain', json);
    patchRust(tok);
    await runSet(set, tok, plain, smallCases);
  }
} finally {
  fs.rmSync(tmp, { recursive: true, force: true });
}

const header = [
  '# Tokenizer golden cases for tests/c/test_tokenizer.c.',
  '# Made by tests/golden/tokenizer/make_golden.mjs with @huggingface/transformers (see that file',
  '# for the format and for the three corrections that make it follow the Rust tokenizers library).',
  `# ${lines.filter((l) => l.startsWith('case') || l.startsWith('bytes')).length} cases.`,
  `# Cases whose ids the corrections changed: ${changedByPatch.length}`,
  ...changedByPatch.map((s) => '#   ' + esc(s)),
];
fs.writeFileSync(outTsv, header.concat(lines).join('\n') + '\n');
fs.writeFileSync(path.join(outSmall, 'vocab.txt'), smallVocab.join('\n') + '\n');
console.log(`wrote ${outTsv} (${lines.length} lines) and ${outSmall}/ (${smallVocab.length} entries)`);
for (const s of changedByPatch) console.log('patched: ' + s);

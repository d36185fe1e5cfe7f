// Text from a model or a peer made safe where it lands: inert in generated code, valid UTF-8 in
// JSON, HTML and protobuf, and one line in text logs. Node, graph and value
// names, attributes and doc strings are data: where one is echoed into the CUDA text fusetune
// ships (a `// stage MatMul 'NAME'` comment, the only place names reach it; identifiers are
// generated, never taken from a model), it goes through inert_comment first.
//
// inert_comment keeps the characters of a safe alphabet (ASCII letters, digits, space and
// _ - . : , ( ) [ ] ' = + # / @ < >) and writes every other byte as %XX (its hex code), so the
// result can end no comment and start no line: no newline or carriage return, no backslash (line
// continuation), no '*' (so no "*/"), no '?' (so no trigraph such as ??/), no control character,
// no byte >= 0x80 (so no UTF-8 line or paragraph separator). The same input gives the same output,
// and distinct inputs stay distinct (a '%' is written %25). is_inert_comment says whether a text is
// already of that alphabet (the emitter checks every comment with it before printing).
//
// Where peer text (a worker's name, a model's name, node names, an error quoting them) lands in
// JSON, HTML, protobuf `string` fields or log lines it must be valid UTF-8: valid_utf8 keeps every
// well-formed UTF-8 sequence as it is and writes each byte that is not part of one (a stray
// continuation byte, a truncated sequence, an overlong form, a surrogate, a code point over
// U+10FFFF, 0xC0, 0xC1, 0xF5-0xFF) as the four characters `\xNN` (its hex code, upper case), so
// the result is always valid UTF-8, valid input comes back unchanged, and the culprit bytes stay
// readable. one_line is valid_utf8 for text logs: besides, a newline, carriage return or tab is
// written `\n`, `\r`, `\t`, every other control character (C0, DEL, C1 such as U+0085 NEL) and
// the line and paragraph separators U+2028 and U+2029 as `\xNN` or `\uNNNN`, so a value can never
// start a log line of its own.
#pragma once

#include <string>
#include <string_view>

namespace fusetune {

std::string inert_comment(std::string_view text);
bool is_inert_comment(std::string_view text);
bool is_valid_utf8(std::string_view text);  // whether valid_utf8 would return it unchanged
std::string valid_utf8(std::string_view text);
std::string one_line(std::string_view text);

}  // namespace fusetune

// Text from a model or a peer made inert where it lands in generated code. Node, graph and value
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
#pragma once

#include <string>
#include <string_view>

namespace fusetune {

std::string inert_comment(std::string_view text);
bool is_inert_comment(std::string_view text);

}  // namespace fusetune

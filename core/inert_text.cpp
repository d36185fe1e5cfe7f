#include "core/inert_text.h"

#include <cstdint>
#include <cstdio>

namespace fusetune {
namespace {

bool safe_char(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  switch (c) {
    case ' ': case '_': case '-': case '.': case ':': case ',': case '(': case ')': case '[': case ']':
    case '\'': case '=': case '+': case '#': case '/': case '@': case '<': case '>':
      return true;
    default:
      return false;
  }
}

// The length of the well-formed UTF-8 sequence at text[i] (1 to 4), or 0 when text[i] starts none
// (Unicode's table 3-7: no overlong form, no surrogate, nothing over U+10FFFF).
size_t utf8_sequence(std::string_view text, size_t i, uint32_t& code) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b = at(i);
  if (b < 0x80) {
    code = b;
    return 1;
  }
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    n = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    n = 3;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    n = 4;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  code = b & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    const unsigned char c = at(i + k);
    if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return 0;
    code = (code << 6) | (c & 0x3F);
  }
  return n;
}

void append_escape(std::string& out, const char* form, uint32_t code) {
  char buf[8];
  std::snprintf(buf, sizeof buf, form, static_cast<unsigned>(code));
  out += buf;
}

// valid_utf8 and one_line: `lines` escapes what could break a log line.
std::string escaped(std::string_view text, bool lines) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    uint32_t code = 0;
    const size_t n = utf8_sequence(text, i, code);
    if (n == 0) {
      append_escape(out, "\\x%02X", static_cast<unsigned char>(text[i]));
      ++i;
      continue;
    }
    if (lines && code == '\n') {
      out += "\\n";
    } else if (lines && code == '\r') {
      out += "\\r";
    } else if (lines && code == '\t') {
      out += "\\t";
    } else if (lines && (code < 0x20 || code == 0x7F)) {
      append_escape(out, "\\x%02X", code);
    } else if (lines && ((code >= 0x80 && code <= 0x9F) || code == 0x2028 || code == 0x2029)) {
      append_escape(out, "\\u%04X", code);
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  return out;
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
  uint32_t code = 0;
  for (size_t i = 0, n = 0; i < text.size(); i += n) {
    n = utf8_sequence(text, i, code);
    if (n == 0) return false;
  }
  return true;
}

std::string valid_utf8(std::string_view text) { return is_valid_utf8(text) ? std::string(text) : escaped(text, false); }

std::string one_line(std::string_view text) { return escaped(text, true); }

std::string inert_comment(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (safe_char(c)) {
      out += c;
      continue;
    }
    const auto b = static_cast<unsigned char>(c);
    out += '%';
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

bool is_inert_comment(std::string_view text) {
  for (const char c : text) {
    if (!safe_char(c) && c != '%') return false;
  }
  return true;
}

}  // namespace fusetune

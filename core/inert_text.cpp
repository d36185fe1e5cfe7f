#include "core/inert_text.h"

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

}  // namespace

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

#include "dashboards/report.h"

#include "core/error.h"
#include "dashboards/assets.h"

namespace fusetune::dashboards {

namespace {

// `what` in place of the one `tag` of the page.
void replace_tag(std::string& page, const std::string& tag, const std::string& what) {
  const size_t at = page.find(tag);
  check(at != std::string::npos && page.find(tag, at + 1) == std::string::npos, "report: the page has no single ", tag);
  page.replace(at, tag.size(), what);
}

// A script's text inline: "</script" inside it would end the element early.
std::string inline_script(std::string_view code) {
  std::string out(code);
  for (size_t at = 0; (at = out.find("</", at)) != std::string::npos; at += 3) out.replace(at, 2, "<\\/");
  return out;
}

// JSON as a script's text: every '<' written \u003c (only a string can hold one, where the escape
// means the same), so neither "</script" nor "<!--" (which with a later "<script" would keep the
// element open past its end, blanking the page) appears; text that is not UTF-8 becomes U+FFFD.
std::string inline_json(const nlohmann::json& data) {
  const std::string text = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '<') {
      out += "\\u003c";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string report_html(const nlohmann::json& jobs, const nlohmann::json& job) {
  std::string page(asset("/index.html").bytes);
  replace_tag(page, "<link rel=\"stylesheet\" href=\"dashboard.css\">",
              "<style>\n" + std::string(asset("/dashboard.css").bytes) + "</style>");
  // Chart.js's minified text holds "</" only inside strings and regular expressions, where "<\/"
  // means the same.
  replace_tag(page, "<script src=\"chart.min.js\"></script>",
              "<script>\n" + inline_script(asset("/chart.min.js").bytes) + "\n</script>");
  const nlohmann::json data = {{"/api/jobs", jobs}, {"/api/jobs/" + std::to_string(job.at("job_id").get<int64_t>()), job},
                               {"job", job}};
  replace_tag(page, "<script src=\"dashboard.js\" defer></script>",
              "<script>\nwindow.FUSETUNE_REPORT = " + inline_json(data) + ";\n</script>\n<script>\n" +
                  inline_script(asset("/dashboard.js").bytes) + "\n</script>");
  return page;
}

}  // namespace fusetune::dashboards

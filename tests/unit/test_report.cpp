// `fusetune report` (dashboards/report.h) of a job whose model name is markup: the page embeds the
// job's data in a script element, and a name such as `<!--<script>` (which would keep that element
// open past its end and blank the page) or `</script>` stays data: written \u003c, the element
// closes where the page closes it, and the data parses back to the name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/files.h"
#include "storage/job_queue.h"
#include "storage/search_db.h"
#include "unit/cli_run.h"

namespace fusetune {
namespace {

namespace fs = std::filesystem;

TEST(Report, AModelNamedLikeMarkupStaysData) {
  const fs::path dir = fs::temp_directory_path() / ("fusetune_report_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string name = "<!--<script>alert(1)</script>\xff.onnx";
  {
    storage::SearchDb db(dir / "search.db");
    storage::JobQueue queue(db);
    queue.put_model("sha256:m", name, {{"m.onnx", "graph"}});
    storage::JobRecord j;
    j.model_digest = "sha256:m";
    j.model_name = name;
    j.device = {"h100", "sm_90"};
    j.options = "{}";
    ASSERT_EQ(queue.create_job(j), 1);
  }
  const testing::Outcome o =
      testing::run_cli("report 1 --db " + (dir / "search.db").string() + " --out " + (dir / "report.html").string());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const std::string page = read_file(dir / "report.html", "the report");
  const std::string opening = "<script>\nwindow.FUSETUNE_REPORT = ";
  const size_t start = page.find(opening);
  ASSERT_NE(start, std::string::npos);
  const size_t end = page.find("</script>", start);
  ASSERT_NE(end, std::string::npos);
  const std::string script = page.substr(start + opening.size(), end - start - opening.size());
  // The element's text holds no markup the HTML parser would act on.
  EXPECT_EQ(script.find("<!--"), std::string::npos) << script;
  EXPECT_EQ(script.find("<script"), std::string::npos) << script;
  EXPECT_EQ(script.find('<'), std::string::npos) << script;
  EXPECT_NE(script.find("\\u003c!--\\u003cscript>alert(1)\\u003c/script>"), std::string::npos) << script;
  // And it is the data: the JSON parses, the name is there (its stray byte as U+FFFD).
  ASSERT_EQ(script.substr(script.size() - 2), ";\n");
  const nlohmann::json data = nlohmann::json::parse(script.substr(0, script.size() - 2));
  EXPECT_EQ(data["job"]["model_name"], "<!--<script>alert(1)</script>\xef\xbf\xbd.onnx");
  EXPECT_EQ(data["/api/jobs"]["jobs"][0]["model_name"], data["job"]["model_name"]);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fusetune

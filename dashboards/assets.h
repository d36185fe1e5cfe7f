// Assets: the dashboard's page, script and style (dashboards/web/) and Debian's Chart.js
// (libjs-chart.js), built into the binary by dashboards/embed_assets.cmake: the dashboard and
// `fusetune report` need no network and no files beside the binary.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fusetune::dashboards {

struct Asset {
  std::string path;          // as served: "/index.html", "/chart.min.js"
  std::string content_type;  // "text/html; charset=utf-8"
  std::string_view bytes;
};

const std::vector<Asset>& assets();
// The asset served at `path`; throws Error when there is none.
const Asset& asset(const std::string& path);

}  // namespace fusetune::dashboards

#include "tools/command_table.h"

#include <algorithm>
#include <set>

#include "core/error.h"

namespace fusetune::cli {

namespace {

// The options of every command that makes a job (tune, submit), and the limits of every HTTP side
// (the coordinator's --http, a worker's --metrics).
const std::vector<OptionSpec> kJobOptions = {
    {"shape", "NAME=DxD", "fixes an input's symbolic dimensions (repeat for each input)", false, true},
    {"candidates", "N", "tile candidates measured per group and round (default 8)"},
    {"plan-device", "NAME", "the GPU whose kernels a host job generates and measures (default h100)"},
    {"trials", "N", "candidates measured in the whole job, spread over its groups (default: 3 rounds)"},
    {"time", "S", "no new search round after S seconds of the job (default: no limit)"},
    {"precision", "model|tf32", "model: the model's types; tf32: float32 MatMuls may run on TF32 tensor cores"},
    {"libraries", "all|none|cublasLt,cudnn", "the vendor libraries whose calls may be candidates (default all)"},
};
const std::vector<OptionSpec> kHttpLimits = {
    {"http-max-connections", "N", "connections served at once"},
    {"http-max-header-kb", "KB", "a request's header size"},
    {"http-max-headers", "N", "a request's header count"},
    {"http-timeout-s", "S", "how long a request may take to arrive"},
    {"http-keep-alive-s", "S", "how long an idle connection stays open"},
};

// A command's own options followed by a shared list.
std::vector<OptionSpec> with(std::vector<OptionSpec> own, const std::vector<OptionSpec>& shared) {
  own.insert(own.end(), shared.begin(), shared.end());
  return own;
}

const OptionSpec kKey = {"key", "NAME.key", "this side's CURVE key (fusetune keys generate)"};
const OptionSpec kCoordinatorKey = {"coordinator-key", "COORD.pub", "the coordinator's public CURVE key"};
const OptionSpec kCoordinator = {"coordinator", "tcp://HOST:PORT", "the coordinator's endpoint", true};
const OptionSpec kLogFormat = {"log-format", "text|json", "one line of text, or one JSON object, per log line"};
const OptionSpec kDb = {"db", "PATH", "the search database (default ~/.cache/fusetune/search.db)"};
const OptionSpec kDevice = {"device", "NAME", "the GPU planned for (h100, h200, a100, l4, ...)"};
const OptionSpec kDeviceFile = {"device-file", "PATH", "a device description (JSON) instead of a name"};
const OptionSpec& kShape = kJobOptions[0];
const OptionSpec& kPrecision = kJobOptions[5];
const OptionSpec& kLibraries = kJobOptions[6];
const OptionSpec kInputValue = {"input-value", "NAME=FILE.pb",
                                "pins graph input NAME to the tensor in FILE (an ONNX TensorProto; a sequence's or "
                                "optional's SequenceProto or OptionalProto also fixes its length or emptiness): an If "
                                "on it is folded to one branch (else both are planned), arguments computed from it specialize",
                                false, true};
const OptionSpec kVerifyBlocks = {"verify-blocks", "N",
                                  "blocks of a kernel's grid verified on the host (default 16; 0: all)"};

std::vector<CommandSpec> make_table() {
  return {
      {"tune", "MODEL.onnx", "tunes the model with an embedded coordinator and a local worker and writes the best plan",
       with({{"device", "auto|host|NAME",
              "auto: the first GPU, else a dry run for the h100; host: timed on this machine's executor; a GPU "
              "this machine lacks: a dry run"},
             {"out", "PLAN_DIR", "writes the tuned plan bundle there"},
             kDb,
             {"compile-jobs", "N", "threads compiling candidates (default: one a core)"},
             kVerifyBlocks,
             {"no-timing", "", "a dry run: candidates compiled and verified, the plan chosen by the cost model"},
             {"verbose", "", "prints the embedded coordinator's log"}},
            kJobOptions)},
      {"coordinator", "", "the tuning service: plans jobs, leases tasks to workers, keeps the search database",
       with({{"listen", "tcp://ADDRESS:PORT", "where workers and clients connect (port 0: one the system chooses)",
              true},
             kDb,
             {"key", "COORD.key", "the coordinator's CURVE key: only the keys allowed below are served"},
             {"allow-workers", "KEYS", "a folder or file of the workers' public keys"},
             {"allow-clients", "KEYS", "a folder or file of the clients' public keys"},
             {"heartbeat-ms", "MS", "how often workers report (default 1000)"},
             {"worker-timeout-ms", "MS", "a worker silent this long is lost, its leases requeued (default 5000)"},
             {"max-attempts", "N", "leases of one task before it fails (default 3)"},
             {"max-message-mb", "MB", "the largest message accepted"},
             {"max-upload-gb", "GB", "the largest model upload"},
             {"max-client-upload-gb", "GB", "the uploads one client may keep"},
             {"max-store-gb", "GB", "the models kept beside the database"},
             {"http", "HOST:PORT", "serves the live dashboard, /metrics and the JSON API (port 0: chosen)"},
             {"http-token-file", "FILE", "the bearer token the HTTP side asks beyond loopback"},
             kLogFormat,
             {"endpoint-file", "PATH", "writes the endpoints bound, as JSON, once listening"}},
            kHttpLimits)},
      {"worker", "", "a worker daemon: compiles, verifies and times candidates on this machine's GPUs (or host)",
       with({kCoordinator,
             {"device", "all|N|host|N,M,...", "the devices measured on, one worker each (default all)"},
             {"compile-jobs", "N", "threads compiling candidates (default: one a core)"},
             {"id", "NAME", "this worker's name (default: host name and device)"},
             {"drain-seconds", "S", "on SIGTERM, how long the task under way may finish (default 30)"},
             kKey,
             kCoordinatorKey,
             kLogFormat,
             {"metrics", "HOST:PORT", "serves the devices' figures at /metrics"},
             {"metrics-token-file", "FILE", "the bearer token /metrics asks beyond loopback"},
             {"quiet", "", "logs warnings and errors only"}},
            kHttpLimits)},
      {"submit", "MODEL.onnx", "uploads the model and queues a tuning job; prints its id",
       with({kCoordinator,
             {"device", "NAME|host", "the GPU the workers time on, or host (default host)"},
             {"wait", "", "waits for the job and prints its table"},
             {"timeout-s", "S", "how long the request waits for the coordinator (default 120)"},
             kKey,
             kCoordinatorKey},
            kJobOptions)},
      {"status",
       "[JOB]",
       "the jobs on a coordinator, or one job with its summary",
       {kCoordinator,
        {"json", "", "as JSON, the shape of the HTTP API's /api/jobs"},
        {"timeout-s", "S", "how long the request waits for the coordinator (default 10)"},
        kKey,
        kCoordinatorKey}},
      {"cancel",
       "JOB",
       "cancels a job (a finished one stays as it ended)",
       {kCoordinator,
        {"timeout-s", "S", "how long the request waits for the coordinator (default 10)"},
        kKey,
        kCoordinatorKey}},
      {"export",
       "JOB",
       "writes a finished job's tuned plan bundle",
       {kCoordinator,
        {"out", "PLAN_DIR", "the bundle's directory", true},
        {"timeout-s", "S", "how long the request waits for the coordinator (default 600)"},
        kKey,
        kCoordinatorKey}},
      {"report",
       "JOB",
       "a job's charts and figures as one self-contained HTML page, from the search database alone",
       {{"out", "report.html", "the page written", true}, kDb}},
      {"keys",
       "generate NAME",
       "a CURVE key pair: NAME.key (private) and NAME.pub",
       {{"out", "DIR", "where the pair is written (default .)"}}},
      {"compile",
       "MODEL.onnx",
       "generates the kernels of the model's plan, verifies each on the host and writes a plan bundle",
       {kDevice,
        kDeviceFile,
        {"out", "PLAN_DIR", "the bundle's directory (nothing is written when a kernel fails)", true},
        kShape,
        kInputValue,
        {"bound", "NAME=N",
         "keeps at most N entries of output NAME of data-dependent size (NonMaxSuppression, Unique, NonZero) where "
         "the shapes allow more; its count still says how many there were",
         false, true},
        kPrecision,
        kLibraries,
        kVerifyBlocks,
        {"dump-after", "PASS|all", "prints what a pass made (import, fold, fuse, plan, generate, verify; a comma list, or all)"},
        {"verify-each", "", "checks each pass's result before the next pass takes it"}}},
      {"run",
       "MODEL.onnx|PLAN_DIR",
       "runs a model on the reference interpreter, or a plan bundle on the GPU or the host; compares with the "
       "expected outputs",
       {{"inputs", "DIR", "input_N.pb files (and output_N.pb to compare with)", true},
        {"out", "DIR", "writes the outputs there"},
        {"rtol", "R", "relative tolerance of the comparison"},
        {"atol", "A", "absolute tolerance of the comparison"},
        kShape,
        {"backend", "auto|host|cuda|cuda:N", "where a plan runs (default auto: the first GPU, else the host)"},
        {"repeat", "N", "times N runs of the plan after the first"},
        {"per-kernel", "", "then times each launch of the plan alone (the L2 flushed before each run on a GPU) beside its modeled time"},
        {"verify-blocks", "N",
         "on the host, the blocks of each launch's grid the race and initialisation checks cover (default 64; 0: all); "
         "memcheck and synccheck cover every block"}}},
      {"profile",
       "PLAN_DIR",
       "runs a plan bundle once on the host executor and counts what each kernel does to memory against the model",
       {{"inputs", "DIR", "input_N.pb files (default: random inputs)"},
        {"seed", "S", "the random inputs' seed (default 1)"},
        {"sites", "N", "access sites listed per kernel"},
        {"sol", "", "each kernel's speed of light on the plan's device beside its modeled time"},
        {"ptx", "", "each kernel's habits in the PTX NVRTC emits for the plan's device (conversions, access widths, cp.async, tensor cores, division)"},
        {"json", "", "as JSON"}}},
      {"inspect",
       "MODEL.onnx",
       "op histograms, unsupported ops, FLOPs, parameters, unfused against minimum DRAM traffic",
       {kShape, {"json", "", "as JSON"}}},
      {"plan",
       "MODEL.onnx",
       "fusion groups, launches, the best modeled tile candidates per group, modeled DRAM traffic",
       {kDevice,
        kDeviceFile,
        kShape,
        {"top-k", "K", "candidates listed per group with --json (default 12; the plan is the same whatever K)"},
        kPrecision,
        kLibraries,
        {"json", "", "as JSON"},
        {"no-fusion", "", "one group per node: the unfused plan"},
        {"keep-fused", "", "keeps each fused group whole instead of weighing its parts"}}},
      {"db",
       "stats|gc|vacuum|export FILE|import FILE",
       "the search database: counts per device identity and size; gc drops finished tasks' payloads (keeps every "
       "measurement); vacuum shrinks the file; import merges",
       {kDb}},
      {"worker-child",
       "",
       "a worker's measuring child process, which the worker starts",
       {{"device", "N|host", ""}},
       true},
  };
}

std::string option_text(const OptionSpec& o) { return "--" + o.name + (o.value.empty() ? "" : " " + o.value); }

}  // namespace

const std::vector<CommandSpec>& command_table() {
  static const std::vector<CommandSpec> table = make_table();
  return table;
}

const CommandSpec& command_spec(const std::string& name) {
  for (const CommandSpec& c : command_table()) {
    if (c.name == name) return c;
  }
  fail("unknown command '", name, "'");
}

std::string synopsis(const CommandSpec& spec) {
  std::string s = "fusetune " + spec.name;
  if (!spec.operands.empty()) s += " " + spec.operands;
  for (const OptionSpec& o : spec.options) {
    s += " ";
    s += o.required ? option_text(o) : "[" + option_text(o) + "]";
    if (o.repeatable) s += "...";
  }
  return s;
}

std::string command_help(const CommandSpec& spec) {
  std::string s = "usage: " + synopsis(spec) + "\n" + spec.summary + "\n";
  if (!spec.options.empty()) s += "options:\n";
  for (const OptionSpec& o : spec.options) {
    std::string left = "  " + option_text(o);
    left.resize(std::max<size_t>(left.size() + 2, 34), ' ');
    s += left + o.help + (o.required ? " (required)" : "") + "\n";
  }
  return s;
}

std::string overview() {
  std::string s = "usage: fusetune COMMAND ...   (fusetune help COMMAND: its options)\ncommands:\n";
  for (const CommandSpec& c : command_table()) {
    if (c.internal) continue;
    s += "  " + synopsis(c).substr(std::string("fusetune ").size()) + "\n      " + c.summary + "\n";
  }
  return s;
}

Args parse_args(const CommandSpec& spec, const std::vector<std::string>& argv) {
  std::set<std::string> valued, switches;
  for (const OptionSpec& o : spec.options) (o.value.empty() ? switches : valued).insert(o.name);
  Args args(argv, valued, switches);
  for (const OptionSpec& o : spec.options) {
    check(!o.required || args.has(o.name), "--", o.name, " is required; usage: ", synopsis(spec));
  }
  return args;
}

void check_usage(bool ok, const CommandSpec& spec) { check(ok, "usage: ", synopsis(spec)); }

}  // namespace fusetune::cli

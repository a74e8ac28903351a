#include "worker/record.h"

#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <typeinfo>

#include "absl/strings/str_cat.h"
#include "common/worker_env.h"

namespace elastrun::worker {
namespace {

std::string Demangle(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(
      abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return status == 0 && name != nullptr ? std::string(name.get())
                                        : std::string(mangled);
}

}  // namespace

ErrorRecord RecordFor(const std::exception_ptr& error) {
  ErrorRecord record;
  record.timestamp = static_cast<int64_t>(std::time(nullptr));
  std::string type = "unknown exception";
  std::string what;
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    type = Demangle(typeid(e).name());
    what = e.what();
  } catch (...) {
    // The thrown type is still known to the runtime, even if not a
    // std::exception (e.g. `throw 42`).
    if (const std::type_info* t = abi::__cxa_current_exception_type()) {
      type = Demangle(t->name());
    }
  }
  const std::string first_line = what.substr(0, what.find('\n'));
  record.message = first_line.empty() ? type : absl::StrCat(type, ": ", first_line);
  record.traceback = absl::StrCat(type, ": ", what, what.empty() || what.back() == '\n' ? "" : "\n");
  return record;
}

ErrorRecord RecordException(const std::exception_ptr& error,
                            const std::string& error_file) {
  ErrorRecord record = RecordFor(error);
  std::fprintf(stderr, "%s", record.traceback.c_str());
  if (!error_file.empty()) {
    absl::Status status = WriteErrorFile(error_file, record);
    if (!status.ok()) {
      std::fprintf(stderr, "elastrun: %s\n", status.ToString().c_str());
    }
  }
  std::fflush(stderr);
  return record;
}

int RunRecorded(const std::function<int()>& main) {
  try {
    return main();
  } catch (...) {
    const char* path = std::getenv(env::kErrorFile);
    RecordException(std::current_exception(), path != nullptr ? path : "");
    return 1;
  }
}

}  // namespace elastrun::worker

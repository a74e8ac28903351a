// C++'s counterpart of torch.distributed.elastic's `@record`: runs a worker's
// main and, if it throws, leaves a torchelastic-compatible error file
// (error_file.h) at TORCHELASTIC_ERROR_FILE, so the launcher can report the
// failure's message instead of a bare exit code. Torch-free.
#ifndef ELASTRUN_WORKER_RECORD_H_
#define ELASTRUN_WORKER_RECORD_H_

#include <exception>
#include <functional>
#include <string>

#include "worker/error_file.h"

namespace elastrun::worker {

// Runs `main` and returns its result. If it throws, the exception is
// recorded with RecordException() and 1 is returned (Python's @record
// re-raises, so the interpreter exits 1 too). Signals and _exit() are not
// caught: the launcher reports those from the exit status.
//
// The record is written after the exception has unwound `main`'s scope. A
// ProcessGroup destroyed by that unwinding closes its connections first, so
// the peers fail (and record) before this rank does and look like the root
// cause. Keep the group alive past `main` (as Python's default group is):
// create it outside, or release it and delete it only on success.
//
//   int main(int argc, char** argv) {
//     return elastrun::worker::RunRecorded([&] { return RealMain(argc, argv); });
//   }
int RunRecorded(const std::function<int()>& main);

// The record for an exception in flight: message "<demangled type>: <first
// line of what()>", traceback the type and the whole what() (c10::Error puts
// its C++ backtrace there), timestamp now.
ErrorRecord RecordFor(const std::exception_ptr& error);

// Prints the record to stderr and writes it to `error_file` (when not
// empty; a write failure is printed too, never thrown). Returns the record.
ErrorRecord RecordException(const std::exception_ptr& error,
                            const std::string& error_file);

}  // namespace elastrun::worker

#endif  // ELASTRUN_WORKER_RECORD_H_

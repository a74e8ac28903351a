// Facts about this host and process that every binary asks for.
#ifndef ELASTRUN_COMMON_HOST_H_
#define ELASTRUN_COMMON_HOST_H_

#include <optional>
#include <string>

namespace elastrun {

// This host's name (gethostname); "localhost" when it cannot be had.
std::string Hostname();

// The environment variable `name`; nullopt when unset (set to "" is "").
std::optional<std::string> GetEnv(const std::string& name);

}  // namespace elastrun

#endif  // ELASTRUN_COMMON_HOST_H_

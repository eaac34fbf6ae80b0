#include "tools/dp/command_failure.hpp"

#include <new>
#include <stdexcept>

#include "core/error.hpp"
#include "tools/dp/remedies.hpp"

namespace dp::cli {

CommandFailure failure_of(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const UsageError& e) {
    return {2, e.what(), ""};
  } catch (const OutOfMemoryExit& e) {  // with its run's remedies
    return {3, e.what(), e.remedies()};
  } catch (const OutOfMemoryError& e) {
    return {3, e.what(), out_of_memory_remedies()};
  } catch (const ReplicaError& e) {
    return {e.out_of_memory ? 3 : 1, e.what(), e.out_of_memory ? out_of_memory_remedies() : ""};
  } catch (const std::bad_alloc&) {
    return {1, "the host ran out of memory (std::bad_alloc); try a smaller --batch, data set or --generated-size", ""};
  } catch (const std::exception& e) {
    return {1, e.what(), ""};
  } catch (...) {
    return {1, "an unknown error", ""};
  }
}

}  // namespace dp::cli

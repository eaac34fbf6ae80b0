#include "plan/largest_batch.hpp"

#include <algorithm>

namespace dp {

int64_t largest_fitting_batch(int64_t start, const std::function<bool(int64_t)>& fits, int64_t limit) {
  start = std::max<int64_t>(1, start);
  int64_t good = 0, bad = 0;
  for (int64_t b = start; b <= limit; b *= 2) {
    if (!fits(b)) {
      bad = b;
      break;
    }
    good = b;
  }
  if (good == 0) {  // not even `start`: down from there, the last that did not fit above
    for (int64_t b = start / 2; b >= 1; bad = b, b /= 2)
      if (fits(b)) {
        good = b;
        break;
      }
    if (good == 0) return 0;
  }
  if (bad == 0) return good;  // every doubling up to the limit fits
  while (bad - good > 1) {
    const int64_t mid = good + (bad - good) / 2;
    (fits(mid) ? good : bad) = mid;
  }
  return good;
}

}  // namespace dp

#include "plan/largest_batch.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>

namespace dp {

namespace {

// The search's state: the fitting batches' peaks, and the bracket (good fits, bad does not; 0: none yet).
class BatchSearch {
 public:
  BatchSearch(const std::function<BatchProbe(int64_t)>& probe, int64_t capacity) : probe_(probe), capacity_(capacity) {}

  bool fits(int64_t batch) {
    const BatchProbe p = probe_(batch);
    if (p.fits) {
      peaks_[batch] = p.peak;
      good = std::max(good, batch);
      fresh_ = true;
    } else {
      bad = bad == 0 ? batch : std::min(bad, batch);
    }
    return p.fits;
  }

  // Where the line through the smallest and the largest fitting plans' peaks reaches the capacity
  // (the largest batch it says fits), once per new fitting plan; 0 when there is no new line to
  // follow. The two points far apart: a plan's peak is a staircase (each device's chunk rounds
  // up), and between neighbouring batches the slope is a stair's, not the trend's.
  int64_t guess() {
    if (capacity_ <= 0 || peaks_.size() < 2 || !fresh_) return 0;
    fresh_ = false;
    const auto hi = std::prev(peaks_.end()), lo = peaks_.begin();
    const double slope = static_cast<double>(hi->second - lo->second) / static_cast<double>(hi->first - lo->first);
    if (!(slope > 0)) return 0;
    const double at = static_cast<double>(hi->first) + static_cast<double>(capacity_ - hi->second) / slope;
    return at >= 4e18 ? int64_t{4} << 60 : std::max(hi->first, static_cast<int64_t>(std::floor(at)));
  }

  int64_t good = 0, bad = 0;

 private:
  const std::function<BatchProbe(int64_t)>& probe_;
  int64_t capacity_;
  std::map<int64_t, int64_t> peaks_;
  bool fresh_ = false;
};

}  // namespace

int64_t largest_fitting_batch(int64_t start, const std::function<BatchProbe(int64_t)>& probe, int64_t capacity,
                              int64_t limit) {
  start = std::max<int64_t>(1, start);
  BatchSearch s(probe, capacity);
  if (!s.fits(start)) {  // not even `start`: halving down from it
    for (int64_t b = start / 2; b >= 1 && s.good == 0; b /= 2) s.fits(b);
    if (s.good == 0) return 0;
  }
  // The last doubling of start within the limit: the answer when it fits.
  int64_t last_doubling = start;
  while (last_doubling <= limit / 2) last_doubling *= 2;
  // Doubling until two fitting plans make a line to follow (or a doubling fails). The line's guess
  // is probed from above: its upper neighbour first, then the guess (when that one fails and the
  // guess fits, the search is over). A fitting probe is a new point near the capacity: the line
  // through it guesses again, a few times at most, and each time at least twice as far up as the
  // last (a line that keeps guessing low does not creep). A guess that fails is mostly a stair or
  // two too high: the search walks down from it in steps of 2, 4 and 8 batches, then halves the
  // bracket. Then it is the plain search's doubling and halving.
  constexpr int kGuesses = 3;
  // A line through two small batches can be far off (their chunks on the same stair): a guess goes
  // at most this many times the largest fitting batch up, and a miss walks down 2 + 4 + 8 at most.
  constexpr int64_t kFurthestGuess = 64, kLongestWalk = 8;
  int guesses = 0;
  int64_t doubling = start;  // the largest doubling known to fit
  int64_t below_guess = 0;   // the guess whose upper neighbour is probed first: the next probe if that fails
  int64_t climb = 2;         // a guess's probe goes at least this far above the largest fitting batch
  int64_t walk = 0;          // after a guess failed: how far below the bracket's top the next probe goes
  while (s.bad == 0 || s.bad - s.good > 1) {
    if (s.bad == 0 && s.good >= last_doubling) return last_doubling;
    int64_t b = 0;
    int64_t g = 0;
    if (below_guess > s.good && (s.bad == 0 || below_guess < s.bad)) {
      b = below_guess;
      below_guess = 0;
      walk = 2;
    } else if (guesses < kGuesses && (g = s.guess()) > 0) {
      ++guesses;
      walk = 0;
      g = std::min(g, s.good * kFurthestGuess);
      if (s.bad == 0 && g >= last_doubling) {
        b = last_doubling;
      } else {
        b = std::clamp(std::max(g + 1, s.good + climb), s.good + 1, s.bad == 0 ? last_doubling : s.bad - 1);
        if (b == g + 1) below_guess = g;
        climb *= 2;
      }
    } else if (s.bad == 0 && guesses > 0) {
      b = std::min(s.good + climb, last_doubling);  // past the guesses, still below the capacity: climbing
      climb *= 2;
    } else if (s.bad == 0) {
      while (doubling <= s.good / 2 && doubling * 2 <= last_doubling) doubling *= 2;  // doublings below good fit
      if (doubling >= last_doubling) return last_doubling;
      b = std::max(doubling * 2, s.good + 1);
    } else if (walk > 0 && walk <= kLongestWalk && walk < (s.bad - s.good) / 2) {
      b = s.bad - walk;
      walk *= 2;
    } else {
      b = s.good + (s.bad - s.good) / 2;
    }
    if (s.fits(b) && s.bad == 0 && b == last_doubling) return last_doubling;
  }
  return s.good;
}

}  // namespace dp

// The bundled AWQ calibration sample (calib_text.h): written for mopt, a mix of English prose on several subjects,
// Python and C++ source, shell commands and structured text, so that the activation statistics of both general
// and code models see their usual inputs.
#include "quant/calib_text.h"

namespace mopt::quant {

const char* const kDefaultCalibText = R"CALIB(The harbor was quiet in the early morning. Fishing boats rocked against the pier, their ropes creaking as the
tide came in, and a few gulls circled above the market hall where the first crates of the day were being stacked.
Maria walked along the water with a thermos of coffee, counting the boats that had already left. Her father had
fished these waters for forty years, and he used to say that the sea told you everything if you were patient
enough to listen: the color of the sky at dawn, the direction of the wind, the way the waves broke on the rocks.

In the nineteenth century, the construction of railways changed the economy of entire regions. Towns that had
depended on river trade found themselves bypassed, while small villages near a station grew into busy centers of
commerce. Historians still debate how much of this growth was caused by the railways themselves and how much
by the industries that were already moving toward coal, steel and textiles. What is clear is that travel times
fell dramatically: a journey that once took a week by coach could be completed in a single day.

Photosynthesis converts light energy into chemical energy. In the chloroplasts of plant cells, chlorophyll absorbs
mostly blue and red light and uses that energy to split water molecules, releasing oxygen. The electrons freed in
this process travel along a transport chain that pumps protons across a membrane, and the resulting gradient
drives the synthesis of ATP. In the Calvin cycle, the plant then fixes carbon dioxide from the air into sugars,
using the ATP and NADPH produced by the light reactions.

To make a simple tomato sauce, warm two tablespoons of olive oil in a wide pan over medium heat. Add a finely
chopped onion and a pinch of salt, and cook until the onion is soft and translucent, about eight minutes. Stir in
two cloves of garlic, cook for one more minute, then add a can of crushed tomatoes. Let the sauce simmer gently
for twenty minutes, stirring now and then, and finish it with torn basil leaves and a little black pepper.

The committee met on Tuesday to review the budget for the coming year. Several members raised concerns about the
rising cost of maintenance for the older buildings, and the treasurer proposed setting aside a reserve fund for
unexpected repairs. After a long discussion, the committee agreed to postpone the new library wing until the
reserve reached an agreed level, and to publish a summary of the decision on the community website.

A prime number is a natural number greater than one that has no divisors other than one and itself. Euclid proved
more than two thousand years ago that there are infinitely many primes: suppose there were only finitely many,
multiply them all together and add one; the result is not divisible by any of them, so either it is prime or it
has a prime factor missing from the list. Either way the list was not complete.

Q: What is the difference between a list and a tuple in Python?
A: Both are ordered sequences, but a list is mutable, so you can append, remove or change its elements, while a
tuple is immutable once it is created. Tuples can therefore be used as dictionary keys and are slightly cheaper to
create, which makes them a good fit for fixed records such as coordinates or database rows.

def merge_sorted(a, b):
    """Merges two sorted lists into one sorted list in linear time."""
    result = []
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i] <= b[j]:
            result.append(a[i])
            i += 1
        else:
            result.append(b[j])
            j += 1
    result.extend(a[i:])
    result.extend(b[j:])
    return result


class LRUCache:
    """A least-recently-used cache with a fixed capacity."""

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self.capacity = capacity
        self._items: dict[str, object] = {}

    def get(self, key: str, default=None):
        if key not in self._items:
            return default
        value = self._items.pop(key)
        self._items[key] = value  # most recently used goes last
        return value

    def put(self, key: str, value: object) -> None:
        if key in self._items:
            self._items.pop(key)
        elif len(self._items) >= self.capacity:
            oldest = next(iter(self._items))
            del self._items[oldest]
        self._items[key] = value


def parse_config(path):
    import json
    import os

    if not os.path.exists(path):
        return {"debug": False, "workers": 4, "log_level": "info"}
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    workers = int(data.get("workers", 4))
    if workers < 1:
        raise ValueError("workers must be at least 1")
    return {**data, "workers": workers}


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Count words in text files.")
    parser.add_argument("files", nargs="+", help="files to read")
    parser.add_argument("--top", type=int, default=10, help="how many words to print")
    args = parser.parse_args()
    counts = {}
    for name in args.files:
        with open(name, encoding="utf-8") as f:
            for line in f:
                for word in line.lower().split():
                    word = word.strip(".,;:!?\"'()[]")
                    if word:
                        counts[word] = counts.get(word, 0) + 1
    for word, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: args.top]:
        print(f"{n:6d} {word}")

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

// Returns the indices of the k largest values, largest first.
std::vector<size_t> top_k(const std::vector<float>& v, size_t k) {
  std::vector<size_t> idx(v.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  k = std::min(k, idx.size());
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](size_t a, size_t b) { return v[a] > v[b]; });
  idx.resize(k);
  return idx;
}

struct Point {
  double x = 0.0, y = 0.0;
  Point operator+(const Point& o) const { return {x + o.x, y + o.y}; }
  double norm2() const { return x * x + y * y; }
};

template <class T>
class RingBuffer {
 public:
  explicit RingBuffer(size_t capacity) : data_(capacity) {}
  bool push(const T& v) {
    if (size_ == data_.size()) return false;
    data_[(head_ + size_++) % data_.size()] = v;
    return true;
  }
  bool pop(T& out) {
    if (size_ == 0) return false;
    out = data_[head_];
    head_ = (head_ + 1) % data_.size();
    --size_;
    return true;
  }

 private:
  std::vector<T> data_;
  size_t head_ = 0, size_ = 0;
};

$ git clone https://example.com/project.git && cd project
$ mkdir -p build && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
$ cmake --build build -j 8
$ ./build/server --port 8080 --threads 4 --log-level info

{
  "name": "inventory",
  "version": "2.3.1",
  "items": [
    {"id": 101, "label": "bolts, M6 x 30", "quantity": 2500, "unit": "pcs"},
    {"id": 102, "label": "washers, M6", "quantity": 4000, "unit": "pcs"},
    {"id": 215, "label": "hydraulic oil", "quantity": 12.5, "unit": "l"}
  ],
  "updated": "2024-03-18T09:41:00Z"
}

SELECT c.name, COUNT(o.id) AS orders, SUM(o.total) AS revenue
FROM customers AS c
JOIN orders AS o ON o.customer_id = c.id
WHERE o.created_at >= DATE '2023-01-01'
GROUP BY c.name
HAVING COUNT(o.id) > 3
ORDER BY revenue DESC
LIMIT 20;

| city      | population | area (km2) | founded |
|-----------|-----------:|-----------:|--------:|
| Lisbon    |    545,000 |        100 |    1179 |
| Valencia  |    792,000 |        135 |     138 |
| Marseille |    873,000 |        241 |    -600 |

The river delta supports an extraordinary variety of birds. In spring, flocks of flamingos arrive from the south
and spread across the shallow lagoons, feeding on small crustaceans that give their feathers a pink color. Herons
stand motionless in the reeds, and the marshes echo with the calls of frogs at night. Conservation groups have
worked for decades to protect the wetlands from drainage and pollution, and several areas are now closed to
visitors during the breeding season.

Dear Mr. Okafor, thank you for your letter of 12 May. I am pleased to confirm that the shipment left our warehouse
on Friday and should reach your office by the end of next week. Please find the invoice and the packing list
attached. If any item arrives damaged, let us know within fourteen days and we will arrange a replacement at no
cost. We look forward to working with you again. Kind regards, Elena Petrova, Customer Service.

The theory of supply and demand describes how prices settle in a competitive market. When the price of a good
rises, producers are willing to supply more of it, while consumers buy less; when the price falls, the opposite
happens. The price at which the quantity supplied equals the quantity demanded is called the equilibrium. Taxes,
subsidies and price controls shift these curves or prevent the market from reaching equilibrium, which is why
economists study their effects with care.

import numpy as np


def softmax(x, axis=-1):
    z = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(z)
    return e / np.sum(e, axis=axis, keepdims=True)


def attention(q, k, v, mask=None):
    scores = q @ k.T / np.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -1e9)
    return softmax(scores) @ v


for epoch in range(3):
    total = 0.0
    for step, (inputs, labels) in enumerate(loader):
        optimizer.zero_grad()
        loss = criterion(model(inputs), labels)
        loss.backward()
        optimizer.step()
        total += loss.item()
        if step % 100 == 0:
            print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
    print(f"epoch {epoch} mean loss {total / (step + 1):.4f}")
)CALIB";

}  // namespace mopt::quant

// put_along_axis's CPU grads for assign: the largest position of a slot takes its grad (backward.h).
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

#include "backward.h"

namespace paddle_ext {
namespace cpu {
namespace put {

template <>
template <typename T, typename Idx>
void Grads<Reduce::Assign>::run(const Backward<T, Idx>& b) {
  PE_BACKWARD_LOCALS(b);
  const Hints pf_g{g, nullptr, int(sizeof(T)), false};
  const ValuesAt<T> no_values;
  // The largest position of a slot wins: visited in reverse, a slot's first visitor is its winner.
  if (buckets) {  // a byte per slot: taken by a later position (fewer pages to fault in than a Counter's)
    HugeScratch taken_mem(geo.slots());
    uint8_t* const taken = taken_mem.as<uint8_t>();
    if (vg)
      bucket_gather<true>(idx, no_values, vg, zero, geo, plan, sizeof(T) + 1, [taken, g, zero](index_t s, T, index_t) {
        const bool won = taken[s] == 0;
        taken[s] = 1;
        return won ? g[s] : zero;
      });
    else
      bucket_scatter(idx, no_values, geo, plan, 1, [taken](index_t s, T, index_t) { taken[s] = 1; });
    if (arr_grad)
      for_slots(geo, plan, [taken, arr_grad, g, zero](index_t s, index_t len, index_t) {
        for (index_t t = 0; t < len; ++t) arr_grad[s + t] = taken[s + t] ? zero : g[s + t];
      });
    return;
  }
  Counter hits(geo, plan);
  Counter* h = &hits;
  visit<true>(idx, geo, plan, pf_g, [h, vg, g, zero](index_t s, index_t p, index_t len, index_t r, auto u) {
    if (vg) {
      if (h->row[r] > 0) {  // a later row of the same destination won every slot
        for (index_t t = 0; t < len; ++t) vg[p + t] = zero;
      } else if (!h->scattered()) {
        std::memcpy(vg + p, g + s, len * sizeof(T));
      } else {
        for (index_t t = 0; t < len; ++t) vg[p + t] = h->slot[s + t] == 0 ? g[s + t] : zero;
      }
    }
    h->add(s, r, u);
  }, zero_bad);
  if (arr_grad)
    for_slots(geo, plan, [h, arr_grad, g, zero](index_t s, index_t len, index_t r) {
      const int32_t rc = h->row[r];
      if (rc > 0) {
        for (index_t t = 0; t < len; ++t) arr_grad[s + t] = zero;
      } else if (!h->scattered()) {
        std::memcpy(arr_grad + s, g + s, len * sizeof(T));
      } else {
        for (index_t t = 0; t < len; ++t) arr_grad[s + t] = h->slot[s + t] > 0 ? zero : g[s + t];
      }
    });
}

PE_PUT_GRADS_INSTANTIATE(Reduce::Assign)

}  // namespace put
}  // namespace cpu
}  // namespace paddle_ext

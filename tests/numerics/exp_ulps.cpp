// exp_ulps: measures the error of the C library's exp (f64) and expf (f32)
// in ulps, the number a plugin declares as exp_ulps (SPEC 4.1), over the
// arguments a softmax gives them: s_j - m in [ln of the smallest normal,
// 0]. The reference is expl (x87's 64-bit significand, 2^-11 of an f64 ulp)
// for exp and exp in double for expf. Prints one line per function;
// docs/plugins-and-packaging.md "Choosing exp_ulps" quotes it.
//   exp_ulps [--check MAX_F64 MAX_F32]: exit 1 when a measured maximum is
//   above the given one (the ctest numerics.exp_ulps_libm).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

namespace {

// |got - exact| in ulps of the exact value's binade for a p-bit format.
template <int P>
long double ulps(long double got, long double exact) {
  int e = 0;
  std::frexp(exact, &e);  // exact = f 2^e, f in [0.5, 1)
  const long double ulp = std::ldexp(1.0L, e - P);
  return std::fabs(got - exact) / ulp;
}

struct Worst {
  long double ulps = 0;
  double at = 0;
};

Worst measure_exp(std::mt19937_64& rng, int n) {
  std::uniform_real_distribution<double> arg(-708.0, 0.0);
  Worst w;
  for (int i = 0; i < n; ++i) {
    const double x = i < 4096 ? -static_cast<double>(i) / 4096.0 : arg(rng);  // near 0 too
    const long double u = ulps<53>(std::exp(x), expl(static_cast<long double>(x)));
    if (u > w.ulps) w = {u, x};
  }
  return w;
}

Worst measure_expf(std::mt19937_64& rng, int n) {
  std::uniform_real_distribution<float> arg(-87.0f, 0.0f);
  Worst w;
  for (int i = 0; i < n; ++i) {
    const float x = i < 4096 ? -static_cast<float>(i) / 4096.0f : arg(rng);
    const long double u = ulps<24>(std::exp(x), std::exp(static_cast<double>(x)));
    if (u > w.ulps) w = {u, x};
  }
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  std::mt19937_64 rng(20260101);  // fixed: the same arguments every run
  constexpr int kArgs = 1 << 22;
  const Worst d = measure_exp(rng, kArgs), f = measure_expf(rng, kArgs);
  std::printf("exp  (f64, C library): max %.3Lf ulps at x = %.17g over %d arguments in [-708, 0]\n",
              d.ulps, d.at, kArgs);
  std::printf("expf (f32, C library): max %.3Lf ulps at x = %.9g over %d arguments in [-87, 0]\n",
              f.ulps, f.at, kArgs);
  if (argc == 4 && std::strcmp(argv[1], "--check") == 0) {
    const double max_d = std::atof(argv[2]), max_f = std::atof(argv[3]);
    if (d.ulps > max_d || f.ulps > max_f) {
      std::printf("above the documented maxima (%g, %g): update docs/plugins-and-packaging.md\n",
                  max_d, max_f);
      return 1;
    }
  }
  return 0;
}

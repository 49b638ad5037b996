// C++ built the way release binaries are (-O2, no frame pointers): templates
// in a namespace, std::sort with a lambda, a virtual call and exceptions
// thrown and caught in a loop. Stacks through it can only be complete by way
// of .eh_frame (ours, libstdc++'s, libgcc_s's and libc's).
//
// Every round does a fixed amount of each kind of work, so the split between
// the chains does not depend on how fast the machine is:
//
//   main -> wl::run_round -> wl::sort_phase<double> -> std::sort internals
//        -> wl::sort_phase<double>(...)::{lambda(double const&, double const&)#1}
//        -> wl::heavy_key<double>
//   main -> wl::run_round -> wl::area_phase -> wl::Ring::area (virtual)
//        -> wl::ring_term
//   main -> wl::run_round -> wl::throw_phase -> wl::parse_or_throw
//        (-> __cxa_throw -> _Unwind_RaiseException ... on the thrown path)
//
// usage: templates SECONDS
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <vector>

#define NOINLINE __attribute__((noinline))

namespace wl {

volatile unsigned long sink;

template <typename T> NOINLINE T heavy_key(T x)
{
	T acc = x;
	for (int i = 0; i < 40; i++)
		acc = acc * static_cast<T>(0.999) + static_cast<T>(i) / (acc + static_cast<T>(3));
	return acc;
}

template <typename T> NOINLINE void sort_phase(std::vector<T> &v, unsigned seed)
{
	for (size_t i = 0; i < v.size(); i++) {
		seed = seed * 1103515245u + 12345u;
		v[i] = static_cast<T>(seed >> 8) / static_cast<T>(1 << 20);
	}
	std::sort(v.begin(), v.end(), [](const T &a, const T &b) { return heavy_key(a) < heavy_key(b); });
	sink += static_cast<unsigned long>(v[v.size() / 2]);
}

struct Shape {
	virtual ~Shape() = default;
	virtual double area(int n) const = 0;
};

NOINLINE double ring_term(double r, int i)
{
	double x = r;
	for (int k = 0; k < 50; k++)
		x = x * 0.5 + (r + i) / (x + 1.0);
	return x;
}

struct Ring : Shape {
	double r;
	explicit Ring(double r_) : r(r_) {}
	NOINLINE double area(int n) const override
	{
		double s = 0;
		for (int i = 0; i < n; i++)
			s += ring_term(r, i);
		return s;
	}
};

struct Dot : Shape {
	NOINLINE double area(int) const override { return 0; }
};

NOINLINE double area_phase(const std::vector<std::unique_ptr<Shape>> &shapes, int n)
{
	double total = 0;
	for (const auto &s : shapes)
		total += s->area(n);
	return total;
}

NOINLINE int parse_or_throw(int x)
{
	if (x % 3 == 0)
		throw std::runtime_error("multiple of three");
	return x * 2;
}

NOINLINE long throw_phase(int n)
{
	long ok = 0, errors = 0;
	for (int i = 0; i < n; i++) {
		try {
			ok += parse_or_throw(i);
		} catch (const std::exception &) {
			errors++;
		}
	}
	return ok + errors;
}

NOINLINE void run_round(std::vector<double> &values, const std::vector<std::unique_ptr<Shape>> &shapes,
			unsigned round)
{
	sort_phase(values, round);
	sink += static_cast<unsigned long>(area_phase(shapes, 200));
	sink += static_cast<unsigned long>(throw_phase(300));
}

} // namespace wl

int main(int argc, char **argv)
{
	using clock = std::chrono::steady_clock;
	double secs = argc > 1 ? std::atof(argv[1]) : 2;
	auto end = clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(secs));
	std::vector<double> values(2000);
	std::vector<std::unique_ptr<wl::Shape>> shapes;

	for (int i = 0; i < 16; i++) {
		if (i % 4 == 3)
			shapes.emplace_back(new wl::Dot());
		else
			shapes.emplace_back(new wl::Ring(1.0 + i));
	}
	for (unsigned round = 1; clock::now() < end; round++)
		wl::run_round(values, shapes, round);
	return 0;
}

// chain: burns CPU for argv[1] seconds (default 3) in a C++ template member
// function reached through two free functions, so the profiler's demangler
// has namespaces, templates and parameter lists to render:
//
//   main;launch(double);drive(int);ns::Widget<int>::spin()
//
// drive() calls spin() 16 times per clock read, so ~99 % of the samples end
// in spin(). spin() keeps a volatile local on the stack: GCC 12 sets up no
// frame pointer in a leaf function that uses no stack, even with
// -mno-omit-leaf-frame-pointer, and a frame-pointer unwinder would then skip
// drive(). The tests are about symbolization, not about that case.
#include <cstdlib>
#include <ctime>

#define NOINLINE __attribute__((noinline))

namespace ns {

template <typename T>
struct Widget {
	volatile T acc;
	NOINLINE void spin();
};

template <typename T>
void Widget<T>::spin()
{
	volatile T local = acc;
	for (int i = 0; i < 100000; i++)
		local = local + (T)(i ^ (local >> 2));
	acc = local;
}

} // namespace ns

static double now_s()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

NOINLINE int drive(int rounds_per_check)
{
	ns::Widget<int> w;
	w.acc = 1;
	for (int i = 0; i < rounds_per_check; i++)
		w.spin();
	return w.acc;
}

NOINLINE int launch(double seconds)
{
	double end = now_s() + seconds;
	int r = 0;
	do {
		r += drive(16);
	} while (now_s() < end);
	return r == 42 ? 1 : 0;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? std::atof(argv[1]) : 3.0;
	if (seconds <= 0)
		seconds = 3.0;
	launch(seconds);
	return 0;
}

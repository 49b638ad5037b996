/*
 * recurse: main -> descend x DEPTH -> leaf, burning CPU in leaf for argv[1]
 * seconds (default 2); DEPTH is argv[2] (default 100). Built without frame
 * pointers: every one of the DEPTH + 2 frames must come from the unwind
 * tables, so the stack shows how deep the BPF walk goes (FW_MAX_USTACK).
 * descend does work after its call so that the call is not a tail call.
 */
#include <stdlib.h>
#include <time.h>

static volatile unsigned long acc;

__attribute__((noinline)) void leaf(void)
{
	for (int i = 0; i < 10000; i++)
		acc += i * acc;
}

__attribute__((noinline)) void descend(int n)
{
	if (n > 1)
		descend(n - 1);
	else
		leaf();
	acc++;
}

int main(int argc, char **argv)
{
	time_t end = time(0) + (argc > 1 ? atoi(argv[1]) : 2);
	int depth = argc > 2 ? atoi(argv[2]) : 100;

	while (time(0) < end)
		descend(depth);
	return 0;
}

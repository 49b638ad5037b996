/* C between Go and Go: a separate file, since a cgo preamble that //export uses may only declare. */
#include "_cgo_export.h"

__attribute__((noinline)) void c_middle(int n)
{
	for (int i = 0; i < 4; i++)
		goCallback(n);
}

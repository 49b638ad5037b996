#include <time.h>
#include <stdlib.h>
static volatile unsigned long acc;
#define N __attribute__((noinline))
N void leaf(void){ for (int i=0;i<10000;i++) acc+=i*acc; }
N void f12(void){ leaf(); acc++; }
N void f11(void){ f12(); acc++; }
N void f10(void){ f11(); acc++; }
N void f9(void){ f10(); acc++; }
N void f8(void){ f9(); acc++; }
N void f7(void){ f8(); acc++; }
N void f6(void){ f7(); acc++; }
N void f5(void){ f6(); acc++; }
N void f4(void){ f5(); acc++; }
N void f3(void){ f4(); acc++; }
N void f2(void){ f3(); acc++; }
N void f1(void){ f2(); acc++; }
int main(int c, char**v){ time_t end=time(0)+(c>1?atoi(v[1]):2); while(time(0)<end) f1(); return 0; }

// A JIT-compiled hot loop for the perf map tests: hotLoop runs until the
// time given in seconds has passed.
public class Hot {
    static long sink;

    static long hotLoop(long n) {
        long x = 0;
        for (long i = 0; i < n; i++) {
            x += i * i ^ (x >>> 3);
        }
        return x;
    }

    public static void main(String[] args) {
        long end = System.nanoTime() + (long) (Double.parseDouble(args[0]) * 1e9);
        while (System.nanoTime() < end) {
            sink += hotLoop(1000000);
        }
        System.out.println(sink);
    }
}

# Known Ruby call chains for the profiler's tests.
#
# main -> outer -> middle -> inner -> {hot_70, cold_30}: the two leaves run
# 7:3 of the time. With "thread", the same chain runs in a second thread
# while the main thread sleeps in join; with "block", inner reaches the
# leaves through a block run by Integer#times (a C method), so Ruby frames
# sit on both sides of native ones.

def spin(n)
  x = 0
  i = 0
  while i < n
    x += i * i
    i += 1
  end
  x
end

def hot_70(n)
  spin(7 * n)
end

def cold_30(n)
  spin(3 * n)
end

def inner(deadline)
  while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
    hot_70(2000)
    cold_30(2000)
  end
end

def middle(deadline)
  inner(deadline)
end

def outer(deadline)
  middle(deadline)
end

def block_inner(deadline)
  while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
    2.times { |k| k.zero? ? hot_70(1000) : cold_30(1000) }
  end
end

def block_outer(deadline)
  block_inner(deadline)
end

def main
  mode = ARGV.fetch(0)
  deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + Float(ARGV.fetch(1))
  case mode
  when "chain" then outer(deadline)
  when "thread" then Thread.new { outer(deadline) }.join
  when "block" then block_outer(deadline)
  else abort "unknown mode #{mode}"
  end
end

main

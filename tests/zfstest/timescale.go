package zfstest

import (
	"os"
	"strconv"
	"time"
)

// TimeScale is FERRY_TEST_TIMESCALE (a whole number, 1 by default), set by
// the OpenZFS lane, whose emulated guest runs the tests 10 to 20 times
// slower than the host, at the lowest priority beside CI's other stages.
// Tests stretch their waits by it: a wait bounds how long a step may
// take; no test asserts a speed.
func TimeScale() time.Duration {
	n, err := strconv.Atoi(os.Getenv("FERRY_TEST_TIMESCALE"))
	if err != nil || n < 1 {
		return 1
	}
	return time.Duration(n)
}

// Package apimetrics reads the API server's own request counters for the
// benchmarks that count what Ferry writes.
package apimetrics

import (
	"context"
	"strconv"
	"strings"

	"k8s.io/client-go/kubernetes"
)

// Writes is the number of write requests (POST, PUT, PATCH, DELETE) the
// API server has served on resource so far (apiserver_request_total).
func Writes(ctx context.Context, kube kubernetes.Interface, resource string) (float64, error) {
	body, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, err
	}
	sum := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="`+resource+`"`) {
			continue
		}
		write := false
		for _, v := range []string{"POST", "PUT", "PATCH", "DELETE"} {
			write = write || strings.Contains(line, `verb="`+v+`"`)
		}
		if !write {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

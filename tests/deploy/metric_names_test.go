package deploy_test

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/ferry-csi/ferry/adapters/metrics"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// ferryMetrics is every metric name Ferry's processes export: each
// collector of adapters/metrics, registered and gathered once.
func ferryMetrics(t *testing.T) map[string]bool {
	t.Helper()
	r := prometheus.NewRegistry()
	metrics.NewBuildInfo(r, "dev", "daemon")
	metrics.NewCSI(r).Observe("/csi.v1.Node/NodePublishVolume", codes.OK, 0)
	metrics.NewZFS(r).Observe("zfs", "get", 0, nil)
	metrics.NewPool(r, "n1", "tank", func(context.Context) (ports.PoolCapacity, error) { return ports.PoolCapacity{TotalBytes: 1}, nil })
	metrics.NewReplica(r, "pvc-1", "n1", func() metrics.ReplicaState {
		return metrics.ReplicaState{Transfer: &metrics.Transfer{}, NewestTaken: time.Unix(1, 0)}
	})
	metrics.NewKept(r, "n1", func(context.Context) ([]ports.KeptCopy, error) { return nil, nil })
	metrics.NewVolumeInfo(r, "pvc-1", "n1", func(context.Context) (ports.VolumeSpec, error) { return ports.VolumeSpec{}, nil })
	l := metrics.NewLiveness(r)
	l.Answers(func(replica.Node) (bool, time.Duration) { return true, 0 })("n2")
	_, _, _ = l.Asker(nopAsker{}).Promise(context.Background(), "n2", "n1")
	metrics.NewEvents(r, nopEvents{}).Record(context.Background(), "pvc-1", ports.Event{Type: ports.EventNormal, Reason: "BecamePrimary"})
	families, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, f := range families {
		out[f.GetName()] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[f.GetName()+s] = true
			}
		}
	}
	return out
}

type nopAsker struct{}

func (nopAsker) Promise(context.Context, replica.Node, replica.Node) (bool, time.Duration, error) {
	return true, 0, nil
}

type nopEvents struct{}

func (nopEvents) Record(context.Context, volume.ID, ports.Event) {}

var metricName = regexp.MustCompile(`\bferry_[a-z_]+\b`)

// namesIn is every ferry_ metric name a text mentions.
func namesIn(text string) []string {
	seen := map[string]bool{}
	for _, n := range metricName.FindAllString(text, -1) {
		seen[n] = true
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// The alerts and the dashboard query only metrics Ferry exports: a metric
// renamed or dropped would leave an alert that never fires, or an empty
// panel.
func TestTheAlertsAndTheDashboardQueryOnlyMetricsFerryExports(t *testing.T) {
	known := ferryMetrics(t)
	rules, err := os.ReadFile("../../deploy/helm/ferry/alerts/ferry.rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, l := range strings.Split(string(rules), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue // comments may name anything
		}
		exprs = append(exprs, l)
	}
	for _, n := range namesIn(strings.Join(exprs, "\n")) {
		if !known[n] {
			t.Errorf("the alert rules query %s, which Ferry does not export", n)
		}
	}
	raw, err := os.ReadFile("../../deploy/helm/ferry/dashboards/ferry.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	queried := 0
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			names := namesIn(q.Expr)
			if len(names) == 0 {
				t.Errorf("panel %q queries no Ferry metric: %s", p.Title, q.Expr)
			}
			for _, n := range names {
				queried++
				if !known[n] {
					t.Errorf("panel %q queries %s, which Ferry does not export", p.Title, n)
				}
			}
		}
	}
	if dash.UID == "" || queried < 20 {
		t.Errorf("dashboard uid %q, %d metric references: not Ferry's dashboard?", dash.UID, queried)
	}
}

package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
)

// transfer is a transfer under way to (or from) one copy, as its volume
// manager's metrics say.
type transfer struct {
	Bytes, Estimated int64
	ETA              time.Duration
}

// volumeRow is one line of `kubectl ferry status`.
type volumeRow struct {
	rv        rvapi.ReplicatedVolume
	transfers map[string]transfer // by node
	// lag is the most any copy lags, in seconds (ferry_replica_lag_seconds);
	// nil: no volume manager said.
	lag *float64
}

// writeStatus prints every volume: its claim, its copies and where, the
// primary, the newest snapshot and the worst lag (in snapshots, and in
// seconds as the volume managers say), and each transfer under way with a
// bar.
func writeStatus(w io.Writer, rows []volumeRow) error {
	sort.Slice(rows, func(i, j int) bool { return rows[i].rv.Name < rows[j].rv.Name })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VOLUME\tCLAIM\tRF\tREADY\tPRIMARY\tCOPIES\tNEWEST\tMAX LAG\tPHASE\tLAG")
	for _, r := range rows {
		s, sp := r.rv.Status, r.rv.Spec
		claim := "-"
		if sp.ClaimName != "" {
			claim = sp.ClaimNamespace + "/" + sp.ClaimName
		}
		primary := s.Primary
		if primary == "" {
			primary = "-"
		}
		newest := s.Newest
		if newest == "" {
			newest = "-"
		}
		lag := "-"
		if r.lag != nil {
			lag = (time.Duration(*r.lag * float64(time.Second))).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%d\t%s\t%s\n", r.rv.Name, claim, sp.ReplicationFactor, s.ReadyReplicas, primary,
			copies(s.Replicas), newest, s.MaxLag, orDash(s.Phase), lag)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var lines []string
	for _, r := range rows {
		nodes := make([]string, 0, len(r.transfers))
		for n := range r.transfers {
			nodes = append(nodes, n)
		}
		sort.Strings(nodes)
		for _, n := range nodes {
			lines = append(lines, fmt.Sprintf("  %s on %s  %s", r.rv.Name, n, progress(r.transfers[n])))
		}
	}
	if len(lines) > 0 {
		fmt.Fprintf(w, "\nTransfers under way:\n%s\n", strings.Join(lines, "\n"))
	}
	return nil
}

// copies lists a volume's copies: node:snapshot, * for the active
// primary, ! for a copy not ready (it could not take over).
func copies(rs []rvapi.ReplicaStatus) string {
	if len(rs) == 0 {
		return "-"
	}
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		c := fmt.Sprintf("%s:%d", r.Node, r.Snapshot)
		switch {
		case r.Active:
			c += "*"
		case !r.Ready:
			c += "!"
		}
		out = append(out, c)
	}
	return strings.Join(out, ",")
}

// progress is a bar of a transfer: [#####.....] 50% 1.0 GiB of 2.0 GiB,
// 12s left; without an estimate, the bytes moved only.
func progress(t transfer) string {
	const width = 20
	if t.Estimated <= 0 {
		return fmt.Sprintf("[%s] %s moved", strings.Repeat("?", width), size(t.Bytes))
	}
	f := math.Min(float64(t.Bytes)/float64(t.Estimated), 1)
	full := int(f * width)
	s := fmt.Sprintf("[%s%s] %3.0f%% %s of %s", strings.Repeat("#", full), strings.Repeat(".", width-full), f*100, size(t.Bytes), size(t.Estimated))
	if t.ETA > 0 {
		s += fmt.Sprintf(", %s left", t.ETA.Round(time.Second))
	}
	return s
}

// size is a byte count in binary units.
func size(b int64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := int64(unit), 0
	for n := b / unit; n >= unit && exp < 4; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTP"[exp])
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

package main

import (
	"context"
	"fmt"
	"html/template"
	"io"
	"math"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
)

// The events a status page lists as what happened lately: failovers,
// fences, copies rolled back, replaced or kept aside.
var notable = map[string]bool{
	"TookOver": true, "BecamePrimary": true, "Fenced": true, "NodeFenced": true, "Unfenced": true,
	"RolledBack": true, "Replaced": true, "FencedWritesKept": true, "FencedWritesNotKept": true,
	"CopyRetired": true, "Rediscovered": true, "Conflict": true,
}

// maxHappenings is how many of the newest notable events the page shows.
const maxHappenings = 20

// page is what the status page shows.
type page struct {
	Generated time.Time
	Volumes   []pageVolume
	Happened  []pageEvent
	Warnings  []string
}

type pageVolume struct {
	Name, Claim, Phase, Primary, Newest string
	RF, Ready                           int
	Lag                                 string // the worst copy's, "-" unknown
	Copies                              []pageCopy
}

type pageCopy struct {
	Node, Role, Snapshot string
	Ready                bool
	// Transfer under way: Percent (0-100; -1 unknown) and what it says.
	Transfer        bool
	Percent         int
	TransferCaption string
}

type pageEvent struct {
	Age, Type, Reason, Object, Message string
}

// pageOf builds the page from what status read and the volumes' events.
func pageOf(rows []volumeRow, events []corev1.Event, warnings []string, now time.Time) page {
	p := page{Generated: now, Warnings: warnings}
	sort.Slice(rows, func(i, j int) bool { return rows[i].rv.Name < rows[j].rv.Name })
	for _, r := range rows {
		sp, st := r.rv.Spec, r.rv.Status
		v := pageVolume{Name: r.rv.Name, Claim: "-", Phase: orDash(st.Phase), Primary: orDash(st.Primary), Newest: orDash(st.Newest),
			RF: sp.ReplicationFactor, Ready: st.ReadyReplicas, Lag: "-"}
		if sp.ClaimName != "" {
			v.Claim = sp.ClaimNamespace + "/" + sp.ClaimName
		}
		if r.lag != nil {
			v.Lag = (time.Duration(*r.lag * float64(time.Second))).Round(time.Second).String()
		}
		for _, c := range st.Replicas {
			pc := pageCopy{Node: c.Node, Role: "secondary", Snapshot: "-", Ready: c.Ready, Percent: -1}
			switch {
			case c.Active:
				pc.Role = "primary"
			case !c.Ready:
				pc.Role = "catching up"
			}
			if c.Snapshot != 0 {
				pc.Snapshot = fmt.Sprintf("ferry-%d-%d", c.SnapshotEpoch, c.Snapshot)
			}
			if t, ok := r.transfers[c.Node]; ok {
				pc.Transfer = true
				pc.TransferCaption = fmt.Sprintf("%s moved", size(t.Bytes))
				if t.Estimated > 0 {
					pc.Percent = int(math.Min(float64(t.Bytes)/float64(t.Estimated), 1) * 100)
					pc.TransferCaption = fmt.Sprintf("%d%% of %s", pc.Percent, size(t.Estimated))
					if t.ETA > 0 {
						pc.TransferCaption += fmt.Sprintf(", %s left", t.ETA.Round(time.Second))
					}
				}
			}
			v.Copies = append(v.Copies, pc)
		}
		p.Volumes = append(p.Volumes, v)
	}
	sort.SliceStable(events, func(i, j int) bool { return eventTime(events[i]).After(eventTime(events[j])) })
	for _, e := range events {
		if !notable[e.Reason] {
			continue
		}
		age := "?"
		if t := eventTime(e); !t.IsZero() {
			age = now.Sub(t).Round(time.Second).String() + " ago"
		}
		p.Happened = append(p.Happened, pageEvent{Age: age, Type: e.Type, Reason: e.Reason, Object: e.InvolvedObject.Name, Message: e.Message})
		if len(p.Happened) == maxHappenings {
			break
		}
	}
	return p
}

// phaseClass is a phase's colour on the page.
func phaseClass(phase string) string {
	switch phase {
	case "Available":
		return "ok"
	case "Degraded", "Pending":
		return "warn"
	case "Terminating":
		return "gone"
	}
	return "unknown"
}

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{"phaseClass": phaseClass}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="10">
<title>Ferry: volumes</title>
<style>
body { font-family: "DejaVu Sans", sans-serif; margin: 24px; color: #1c2733; background: #f6f8fa; }
h1 { font-size: 22px; margin: 0 0 4px 0; }
h2 { font-size: 17px; margin: 28px 0 8px 0; }
.sub { color: #5b6673; font-size: 13px; }
table { border-collapse: collapse; width: 100%; background: #fff; }
th, td { text-align: left; padding: 7px 10px; border-bottom: 1px solid #dde3e9; font-size: 14px; vertical-align: top; }
th { background: #e9eef3; font-weight: 600; }
td.nowrap { white-space: nowrap; }
.badge { display: inline-block; padding: 2px 9px; border-radius: 4px; color: #fff; font-weight: 600; font-size: 13px; }
.badge.ok { background: #2e7d32; } .badge.warn { background: #e65100; } .badge.gone { background: #616161; } .badge.unknown { background: #6a1b9a; }
.copy { display: inline-block; margin: 0 8px 6px 0; padding: 5px 8px; border-radius: 4px; border: 2px solid #90a4ae; background: #fff; min-width: 150px; font-size: 13px; }
.copy.primary { border-color: #1565c0; background: #e3f2fd; }
.copy.notready { border-color: #e65100; background: #fff3e0; }
.bar { height: 10px; background: #dde3e9; border-radius: 3px; margin-top: 4px; overflow: hidden; }
.fill { height: 10px; background: #1565c0; }
.fill.unknown { background: repeating-linear-gradient(45deg, #90a4ae, #90a4ae 6px, #cfd8dc 6px, #cfd8dc 12px); width: 100%; }
.Warning { color: #b71c1c; font-weight: 600; }
.warnings { background: #fff3e0; border: 1px solid #e65100; padding: 8px 12px; margin-top: 12px; font-size: 13px; }
</style>
</head>
<body>
<h1>Ferry</h1>
<div class="sub">{{len .Volumes}} volumes · read at {{.Generated.Format "2006-01-02 15:04:05 MST"}} · refreshed every 10 s</div>
{{range .Warnings}}<div class="warnings">{{.}}</div>{{end}}
<h2>Volumes</h2>
<table id="volumes">
<tr><th>Volume</th><th>Claim</th><th>Phase</th><th>Ready / RF</th><th>Newest</th><th>Worst lag</th><th>Copies</th></tr>
{{range .Volumes}}<tr class="volume" data-volume="{{.Name}}">
<td>{{.Name}}</td><td class="nowrap">{{.Claim}}</td>
<td><span class="badge {{phaseClass .Phase}}">{{.Phase}}</span></td>
<td class="nowrap">{{.Ready}} / {{.RF}}</td><td class="nowrap">{{.Newest}}</td><td class="nowrap">{{.Lag}}</td>
<td>{{range .Copies}}<div class="copy{{if eq .Role "primary"}} primary{{else if not .Ready}} notready{{end}}">
<b>{{.Node}}</b> · {{.Role}}<br>{{.Snapshot}}
{{if .Transfer}}<div class="bar">{{if ge .Percent 0}}<div class="fill" style="width: {{.Percent}}%"></div>{{else}}<div class="fill unknown"></div>{{end}}</div>{{.TransferCaption}}{{end}}
</div>{{else}}none yet{{end}}</td>
</tr>
{{else}}<tr><td colspan="7">No Ferry volumes.</td></tr>
{{end}}</table>
<h2>Lately: failovers, fences, copies rolled back or kept</h2>
<table id="happened">
<tr><th>When</th><th>Type</th><th>Reason</th><th>Volume</th><th>What</th></tr>
{{range .Happened}}<tr><td>{{.Age}}</td><td class="{{.Type}}">{{.Type}}</td><td>{{.Reason}}</td><td>{{.Object}}</td><td>{{.Message}}</td></tr>
{{else}}<tr><td colspan="5">Nothing lately.</td></tr>
{{end}}</table>
</body>
</html>
`))

// renderPage writes the page's HTML (every value escaped by html/template).
func renderPage(w io.Writer, p page) error { return pageTemplate.Execute(w, p) }

// volumeEvents reads the events on ReplicatedVolumes (cluster-scoped: they
// live in "default"), where every event of Ferry's lands.
func volumeEvents(ctx context.Context, kube kubernetes.Interface) ([]corev1.Event, error) {
	list, err := kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.kind", rvapi.Kind).String()})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// dashboardHandler serves the page, read afresh for each request (within
// its own deadline), and nothing else.
func dashboardHandler(kube kubernetes.Interface, dyn dynamic.Interface, ns string, now func() time.Time) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		rows, warnings, err := status(ctx, kube, dyn, ns)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		events, err := volumeEvents(ctx, kube)
		if err != nil {
			warnings = append(warnings, "the volumes' events could not be read: "+reason(err))
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
		_ = renderPage(w, pageOf(rows, events, warnings, now()))
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	return mux
}

// loopbackHost refuses a request whose Host is not a loopback name: a
// site the operator visits could otherwise point its own name at
// 127.0.0.1 and read the page (DNS rebinding).
func loopbackHost(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if hh, _, err := net.SplitHostPort(host); err == nil {
			host = hh
		}
		host = strings.Trim(host, "[]")
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			http.Error(w, "this page answers on a loopback address only", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// serveDashboard serves the page on listen until ctx ends, after telling
// where on out. An address that is not loopback is refused unless public:
// the page shows what the operator's credentials may read.
func serveDashboard(ctx context.Context, listen string, public bool, h http.Handler, out io.Writer) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", listen, err)
	}
	if ip := net.ParseIP(host); !public && host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("--listen %q is not a loopback address: the page shows what your credentials may read; add --public to serve it there", listen)
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	if !public {
		h = loopbackHost(h)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	fmt.Fprintf(out, "Ferry's status page: http://%s/ (Ctrl-C to stop)\n", strings.Replace(l.Addr().String(), "[::1]", "localhost", 1))
	if f, ok := out.(interface{ Sync() error }); ok {
		_ = f.Sync()
	}
	if err := srv.Serve(l); err != nil && err != http.ErrServerClosed {
		return err
	}
	return nil
}

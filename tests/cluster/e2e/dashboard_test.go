//go:build cluster

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// availableGreen is the badge of an Available volume on the status page
// (cmd/kubectl-ferry/dashboard.go).
var availableGreen = color.RGBA{0x2e, 0x7d, 0x32, 0xff}

// The status page (kubectl ferry dashboard), rendered by headless
// Chromium: the page the browser built lists every volume of the cluster,
// and its screenshot shows them, each Available one with its green badge.
// FERRY_SCREENSHOT=<file> keeps the screenshot (the README's).
func TestTheStatusPageShowsTheClustersVolumesInABrowser(t *testing.T) {
	browser, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (.ci/run installs it)")
	}
	ns := namespace(t)
	must(t, statefulSetYAML("page"), "-n", ns, "apply", "-f", "-")
	podOf(t, ns, "page", 180*time.Second)
	vol := volumeOf(t, ns, "data-page-0")
	waitReady(t, vol)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	plugin := exec.CommandContext(ctx, "../../../bin/kubectl-ferry", "--kubeconfig", kubeconfig, "dashboard", "--listen", "127.0.0.1:0")
	stdout, err := plugin.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	plugin.Stderr = &stderr
	if err := plugin.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = plugin.Wait() }()
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u := regexp.MustCompile(`http://127\.0\.0\.1:\d+/`).FindString(sc.Text()); u != "" {
				urls <- u
			}
		}
	}()
	var url string
	select {
	case url = <-urls:
	case <-time.After(60 * time.Second):
		t.Fatalf("kubectl ferry dashboard said no address: %s", stderr.String())
	}

	volumes := func() []string {
		out := must(t, "", "get", "rv", "-o", `jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}`)
		return strings.Fields(out)
	}
	before := volumes()
	profile := t.TempDir()
	chrome := func(args ...string) []byte {
		t.Helper()
		args = append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--user-data-dir=" + profile,
			"--window-size=1280,900"}, args...)
		cctx, ccancel := context.WithTimeout(ctx, 120*time.Second)
		defer ccancel()
		cmd := exec.CommandContext(cctx, browser, append(args, url)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("chromium %v: %v\n%s", args, err, errb.String())
		}
		return out.Bytes()
	}
	// The page is loaded again until the test's volume shows Available
	// (a loaded machine may show it Degraded for a moment: a secondary
	// more than the allowed lag behind until its next receive), for a
	// minute at most.
	var dom, row string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(2 * time.Second) {
		dom = string(chrome("--dump-dom"))
		row = regexp.MustCompile(`(?s)data-volume="` + regexp.QuoteMeta(vol) + `".*?</tr>`).FindString(dom)
		if strings.Contains(row, `class="badge ok">Available`) || time.Now().After(deadline) {
			break
		}
		t.Logf("the page shows the test's volume not Available yet: loaded again")
	}
	after := volumes()
	for _, v := range before {
		if slices.Contains(after, v) && !strings.Contains(dom, `data-volume="`+v+`"`) {
			t.Errorf("the page in the browser lacks volume %s", v)
		}
	}
	if !strings.Contains(row, ns+"/data-page-0") || !strings.Contains(row, `class="badge ok">Available`) || strings.Count(row, `class="copy`) != 2 {
		t.Fatalf("the page in the browser lacks the test's volume %s, Available, with its claim and two copies:\n%s", vol, dom)
	}

	// The screenshot is another load of the live page: a loaded machine
	// may show the volume Degraded for a moment (a secondary more than the
	// allowed lag behind until its next receive), so it is taken again
	// until the badge shows, for a minute at most.
	shot := filepath.Join(t.TempDir(), "page.png")
	var green, colours int
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(2 * time.Second) {
		var width int
		green, colours, width = screenshot(t, chrome, shot)
		if width != 1280 {
			t.Errorf("the screenshot is %d wide, want 1280", width)
		}
		if green >= 200 && colours >= 20 || time.Now().After(deadline) {
			break
		}
		t.Logf("the screenshot shows %d pixels of the Available badge: taken again", green)
	}
	// The test's volume is Available: its badge is there, in its colour.
	if green < 200 || colours < 20 {
		t.Errorf("the screenshot shows %d pixels of the Available badge and %d colours: not the page with its volumes", green, colours)
	}
	if keep := os.Getenv("FERRY_SCREENSHOT"); keep != "" {
		b, _ := os.ReadFile(shot)
		if err := os.WriteFile(keep, b, 0o644); err != nil {
			t.Error(err)
		}
	}
}

// screenshot has chrome save the page as a PNG at shot and counts its
// pixels of the Available badge's colour, its colours, and its width.
func screenshot(t *testing.T, chrome func(args ...string) []byte, shot string) (green, colours, width int) {
	t.Helper()
	chrome("--screenshot=" + shot)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(f)
	f.Close()
	if err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	seen := map[color.RGBA]bool{}
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			c := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
			seen[c] = true
			if c == availableGreen {
				green++
			}
		}
	}
	return green, len(seen), img.Bounds().Dx()
}

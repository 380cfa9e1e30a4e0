// Package scripttest replays the domain's race scripts, as etcd's raft
// replays its interaction tests: a script is a sequence of commands, each
// followed by "----" and the output it must print, up to a blank line.
// Each package brings its own commands (a func run on a command's fields);
// this package reads the files, compares, and rewrites the expectations
// with -rewrite. Test support only: imported by _test.go files.
package scripttest

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/*.txt")

// Runner runs one command (a script line's fields), writing what it prints
// to out; an error is printed as "error: ...".
type Runner func(out *strings.Builder, fields []string) error

// Each replays every testdata/*.txt as a subtest named after the file,
// each with a fresh Runner from start.
func Each(t *testing.T, start func() Runner) {
	t.Helper()
	files, _ := filepath.Glob("testdata/*.txt")
	if len(files) == 0 {
		t.Fatal("no scripts in testdata/")
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { Run(t, f, start()) })
	}
}

// Run replays the script at path with run. An empty output reads "ok".
func Run(t *testing.T, path string, run Runner) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rewritten strings.Builder
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			rewritten.WriteString(line + "\n")
			continue
		}
		if sc.Scan() && sc.Text() != "----" {
			t.Fatalf("%s: command %q is not followed by ----", path, line)
		}
		var want []string
		for sc.Scan() && sc.Text() != "" {
			want = append(want, sc.Text())
		}
		out := &strings.Builder{}
		if err := run(out, strings.Fields(line)); err != nil {
			fmt.Fprintf(out, "error: %v\n", err)
		}
		got := strings.TrimRight(out.String(), "\n")
		if got == "" {
			got = "ok"
		}
		rewritten.WriteString(line + "\n----\n" + got + "\n\n")
		if !*rewrite && got != strings.Join(want, "\n") {
			t.Errorf("%s: %s\ngot:\n%s\nwant:\n%s", path, line, got, strings.Join(want, "\n"))
		}
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(strings.TrimRight(rewritten.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

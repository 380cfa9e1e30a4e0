package deploy_test

import (
	"bytes"
	"cmp"
	"fmt"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// ---------------------------------------------------------------------------
// Flags of the ferry binary and of a container's args

// flagInfo is one flag that `ferry MODE --help` lists.
type flagInfo struct {
	typ string // "string", "duration", ...; empty for a bool flag
	def string // default, unquoted; empty when none is shown
}

var (
	helpMu    sync.Mutex
	helpFlags = map[string]map[string]flagInfo{}
)

var defaultRE = regexp.MustCompile(`\(default ("(?:[^"\\]|\\.)*"|[^()]*)\)\s*$`)

// ferryFlags runs `go run ../../cmd/ferry MODE --help` once per mode and
// parses the flags it lists: a line "  -pool string" starts a flag, the
// indented lines after it are its usage, ending in (default ...).
func ferryFlags(t *testing.T, mode string) map[string]flagInfo {
	t.Helper()
	helpMu.Lock()
	defer helpMu.Unlock()
	if f, ok := helpFlags[mode]; ok {
		return f
	}
	cmd := exec.Command("go", "run", ferryCmd, mode, "--help")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go run %s %s --help: %v\n%s", ferryCmd, mode, err, stderr.String())
	}
	flags := map[string]flagInfo{}
	var cur string
	var usage []string
	end := func() {
		if cur == "" {
			return
		}
		f := flags[cur]
		if m := defaultRE.FindStringSubmatch(strings.Join(usage, " ")); m != nil {
			f.def = m[1]
			if s, err := strconv.Unquote(m[1]); err == nil {
				f.def = s
			}
		}
		flags[cur] = f
		cur, usage = "", nil
	}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if strings.HasPrefix(line, "  -") {
			end()
			head, rest, _ := strings.Cut(strings.TrimPrefix(line, "  -"), "\t")
			fields := strings.Fields(head)
			if len(fields) == 0 {
				continue
			}
			cur = fields[0]
			var f flagInfo
			if len(fields) > 1 {
				f.typ = fields[1]
			}
			flags[cur] = f
			usage = []string{strings.TrimSpace(rest)}
			continue
		}
		if cur != "" && strings.HasPrefix(line, "    ") {
			usage = append(usage, strings.TrimSpace(line))
			continue
		}
		end()
	}
	end()
	if len(flags) == 0 {
		t.Fatalf("go run %s %s --help lists no flags (no line starts with \"  -\"); has its output format changed?\n%s", ferryCmd, mode, stdout.String())
	}
	helpFlags[mode] = flags
	return flags
}

// flagValue is the value of --name (or -name) in args, and whether it is
// passed at all.
func flagValue(args []string, name string) (string, bool) {
	value, found := "", false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		n := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if n == a {
			continue
		}
		k, v, hasValue := strings.Cut(n, "=")
		if k != name {
			continue
		}
		found = true
		switch {
		case hasValue:
			value = v
		case i+1 < len(args):
			value = args[i+1]
		}
	}
	return value, found
}

// ferryArgv is the argument list the ferry binary gets in container c: its
// args, after the mode if the command names the binary and the mode.
func ferryArgv(c corev1.Container) ([]string, error) {
	if len(c.Command) == 0 {
		return c.Args, nil
	}
	if path.Base(c.Command[0]) != "ferry" {
		return nil, fmt.Errorf("command %q does not run the ferry binary", c.Command)
	}
	return append(slices.Clone(c.Command[1:]), c.Args...), nil
}

var envRefRE = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// checkFerryArgs checks argv (mode first) against the flags `ferry mode
// --help` lists, the way Go's flag package will parse it.
func checkFerryArgs(argv []string, mode string, accepted map[string]flagInfo, env []corev1.EnvVar) []string {
	var problems []string
	if len(argv) == 0 || argv[0] != mode {
		got := "nothing"
		if len(argv) > 0 {
			got = strconv.Quote(argv[0])
		}
		return []string{fmt.Sprintf("args start with %s, want the mode %q first", got, mode)}
	}
	names := make([]string, 0, len(accepted))
	for n := range accepted {
		names = append(names, "--"+n)
	}
	sort.Strings(names)
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		if a == "--" {
			if i+1 < len(argv) {
				problems = append(problems, fmt.Sprintf("passes arguments after --: %q; `ferry %s` takes none and exits 2", argv[i+1:], mode))
			}
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			problems = append(problems, fmt.Sprintf("passes the positional argument %q; `ferry %s` takes only flags and exits 2 (\"unexpected arguments\")", a, mode))
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		f, ok := accepted[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("passes %q, but `ferry %s --help` lists no flag -%s, so the binary exits 2 (\"flag provided but not defined\"); accepted flags: %s", a, mode, name, strings.Join(names, " ")))
			continue
		}
		if !hasValue && f.typ != "" {
			if i+1 >= len(argv) {
				problems = append(problems, fmt.Sprintf("passes %q last without a value; -%s takes a %s", a, name, f.typ))
				break
			}
			i++
			value = argv[i]
		}
		if envRefRE.MatchString(value) {
			continue
		}
		var err error
		switch f.typ {
		case "":
			if hasValue {
				_, err = strconv.ParseBool(value)
			}
		case "duration":
			_, err = time.ParseDuration(value)
		case "int", "int64":
			_, err = strconv.ParseInt(value, 0, 64)
		case "uint", "uint64":
			_, err = strconv.ParseUint(value, 0, 64)
		case "float64":
			_, err = strconv.ParseFloat(value, 64)
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("passes %q: the value is not a valid %s", a, cmp.Or(f.typ, "bool")))
		}
	}
	defined := map[string]bool{}
	for _, e := range env {
		defined[e.Name] = true
	}
	for _, a := range argv {
		for _, m := range envRefRE.FindAllStringSubmatch(a, -1) {
			if !defined[m[1]] {
				problems = append(problems, fmt.Sprintf("passes %q, but the container defines no env %s, so Kubernetes passes $(%s) literally", a, m[1], m[1]))
			}
		}
	}
	return problems
}

// Package docs checks that the project's documents follow the code.
package docs

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// ARCHITECTURE.md names every package of the module (its layer diagram):
// a package added without a word there fails here.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}", "github.com/ferry-csi/ferry/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	doc, err := os.ReadFile("../../ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, p := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p, "github.com/ferry-csi/ferry"), "/")
		if rel == "" || strings.HasPrefix(rel, "tests/") || strings.HasSuffix(rel, "/mocks") || rel == "domain" || rel == "app" {
			continue // test programs, generated mocks, the layers' doc-only roots
		}
		if !strings.Contains(string(doc), rel) {
			missing = append(missing, rel)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("ARCHITECTURE.md does not name these packages: %v", missing)
	}
}

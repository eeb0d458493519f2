package bench

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

func TestWorkloadTiers(t *testing.T) {
	got := workloadTiers([]string{"gvisor", "container"})
	if !slices.Equal(got, []string{"container", "gvisor"}) {
		t.Errorf("workloadTiers = %v, want the container tier first", got)
	}
}

// TestSuiteArchivePasses extracts the test suite the bench uploads and runs
// it with the host's python3, as the workload line runs it in a sandbox.
func TestSuiteArchivePasses(t *testing.T) {
	b, err := suiteArchive()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tr := tar.NewReader(bytes.NewReader(b))
	files := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, h.Name)
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, _ := io.ReadAll(tr)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		files++
	}
	if files < 8 {
		t.Fatalf("the archive holds %d files, want the library and its tests", files)
	}
	cmd := exec.Command("python3", "-B", "-m", "unittest", "discover", "-q")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the suite fails: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("Ran 37 tests")) {
		t.Errorf("the suite ran another number of tests than 37:\n%s", out)
	}
}

func TestJudgeWorkload(t *testing.T) {
	r := &Report{Results: []Result{
		{Name: "workload/stat-20k (container)", Group: GroupWorkload, Summary: Summary{N: 3, P50: 100}},
		{Name: "workload/stat-20k (gvisor)", Group: GroupWorkload, Summary: Summary{N: 3, P50: 200}, Floor: "workload/stat-20k (container)"},
		{Name: "workload/fork-exec (container)", Group: GroupWorkload, Summary: Summary{N: 3, P50: 100}},
		{Name: "workload/fork-exec (gvisor)", Group: GroupWorkload, Summary: Summary{N: 3, P50: 200}, Floor: "workload/fork-exec (container)"},
	}}
	got := map[string]Budget{}
	for _, b := range judge(r) {
		got[b.What] = b
	}
	if b := got["workload/stat-20k (gvisor) vs container"]; b.Value != 2 || b.Pass || b.Limit != "<= 1.5x" {
		t.Errorf("stat line judged %+v, want 2x failing a 1.5x limit", b)
	}
	if b := got["workload/fork-exec (gvisor) vs container"]; b.Value != 2 || !b.Pass || b.Limit != "<= 2.5x" {
		t.Errorf("fork-exec line judged %+v, want 2x passing a 2.5x limit", b)
	}
	if _, ok := got["workload/stat-20k (container) vs container"]; ok {
		t.Error("the container tier's own line was judged against itself")
	}
}

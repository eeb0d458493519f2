package code

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/agentbox/agentbox/errdefs"
)

// kernelSpec is a Jupyter kernelspec (kernel.json) found in the sandbox.
type kernelSpec struct {
	Name          string            `json:"-"`
	Argv          []string          `json:"argv"`
	DisplayName   string            `json:"display_name"`
	Language      string            `json:"language"`
	InterruptMode string            `json:"interrupt_mode"`
	Env           map[string]string `json:"env"`
}

// kernelDirs are where kernelspecs are looked for, in order.
var kernelDirs = []string{"/usr/local/share/jupyter/kernels", "/usr/share/jupyter/kernels"}

// aliases map the names users type to a language.
var aliases = map[string]string{"py": "python", "python3": "python", "js": "javascript", "ts": "typescript", "node": "javascript"}

// normalizeLanguage lowercases lang and resolves aliases; "" is python.
func normalizeLanguage(lang string) string {
	lang = strings.ToLower(strings.TrimSpace(lang))
	if lang == "" {
		return "python"
	}
	if a, ok := aliases[lang]; ok {
		return a
	}
	return lang
}

// loadSpecs reads every kernelspec under root's kernel dirs.
func loadSpecs(root string) []kernelSpec {
	seen := map[string]bool{}
	var out []kernelSpec
	for _, d := range kernelDirs {
		ents, err := os.ReadDir(filepath.Join(root, d))
		if err != nil {
			continue
		}
		for _, e := range ents {
			if seen[e.Name()] {
				continue
			}
			b, err := os.ReadFile(filepath.Join(root, d, e.Name(), "kernel.json"))
			if err != nil {
				continue
			}
			var ks kernelSpec
			if json.Unmarshal(b, &ks) != nil || len(ks.Argv) == 0 {
				continue
			}
			ks.Name = e.Name()
			ks.Language = strings.ToLower(ks.Language)
			seen[e.Name()] = true
			out = append(out, ks)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// findSpec picks the kernelspec for lang: one named lang, else the first
// whose language is lang.
func findSpec(root, lang string) (kernelSpec, error) {
	specs := loadSpecs(root)
	for _, ks := range specs {
		if ks.Name == lang {
			return ks, nil
		}
	}
	for _, ks := range specs {
		if ks.Language == lang {
			return ks, nil
		}
	}
	var have []string
	for _, ks := range specs {
		have = append(have, ks.Language+" ("+ks.Name+")")
	}
	if len(have) == 0 {
		return kernelSpec{}, errdefs.Invalid("no Jupyter kernel is installed in this sandbox (none under %s); use a template with one, e.g. python (ipykernel)", strings.Join(kernelDirs, ", "))
	}
	return kernelSpec{}, errdefs.Invalid("no Jupyter kernel for language %q in this sandbox; installed: %s", lang, strings.Join(have, ", "))
}

// argv returns the kernel's command line for a connection file.
func (ks kernelSpec) argv(connFile string) []string {
	out := make([]string, len(ks.Argv))
	for i, a := range ks.Argv {
		out[i] = strings.ReplaceAll(a, "{connection_file}", connFile)
	}
	return out
}

func (ks kernelSpec) String() string { return fmt.Sprintf("%s (%s)", ks.Name, ks.Language) }

package config

// E2B ([e2b]) configures the E2B-compatible API under /e2b, which lets the
// unmodified e2b SDKs use agentbox; see docs/e2b.md.
type E2B struct {
	// TemplateAliases (template_aliases) maps an E2B templateID to an
	// agentbox template, TEMPLATE or TEMPLATE@TIER; a templateID with no
	// alias is read the same way. Default: code-interpreter-v1 (the code
	// interpreter SDK's default) is python.
	TemplateAliases map[string]string `toml:"template_aliases"`
}

// validateE2B adds the [e2b] section's problems to v.
func (c Config) validateE2B(v *validator) {
	for id, t := range c.E2B.TemplateAliases {
		if id == "" || t == "" {
			v.addf("e2b.template_aliases maps %q to %q: both the E2B templateID and the agentbox template must be named", id, t)
		}
	}
}

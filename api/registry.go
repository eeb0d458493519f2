package api

// Templates and snapshots through an OCI registry (docs/cluster.md,
// "Templates and snapshots between nodes").

// PushRequest is the body of POST /v1/templates/{name}/push and
// POST /v1/snapshots/{ref}/push.
type PushRequest struct {
	// Ref is where to push: HOST[:PORT]/REPO[:TAG], the registry's host
	// always explicit (agentbox has no default registry).
	Ref string `json:"ref"`
}

// PushResponse answers a push: the ref pushed to and the manifest
// digest, which names the same bytes at any registry
// (HOST/REPO@DIGEST).
type PushResponse struct {
	Ref    string `json:"ref"`
	Digest string `json:"digest"`
}

// PullRequest is the body of POST /v1/templates/pull and
// POST /v1/snapshots/pull.
type PullRequest struct {
	// Ref is what to pull: HOST[:PORT]/REPO[:TAG|@DIGEST].
	Ref string `json:"ref"`
	// Name of the template (a new version of it) or snapshot made; a
	// template's defaults to the last component of the repository, a
	// snapshot's to none.
	Name string `json:"name,omitempty"`
}

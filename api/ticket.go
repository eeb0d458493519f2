package api

import "time"

// Tickets let a browser open a WebSocket, which cannot carry an
// Authorization header: POST /v1/tickets with the key in the header
// returns a ticket for one WebSocket path; the WebSocket request then
// sends it as ?ticket=. A ticket is good once, for TicketTTLSeconds, for
// that path only, and acts as the key that asked for it (checked again
// when it is used, so a key revoked meanwhile is refused).
//
//	POST /v1/tickets  TicketRequest -> 201 Ticket

// TicketRequest asks for a ticket. Path is the WebSocket's path,
// "/v1/sandboxes/{id}/pty/{pid}/ws" (the only kind a ticket opens).
type TicketRequest struct {
	Path string `json:"path"`
}

// Ticket is a single-use credential for one WebSocket request.
type Ticket struct {
	Ticket    string    `json:"ticket"`
	Path      string    `json:"path"`
	ExpiresAt time.Time `json:"expires_at"`
}

// TicketTTLSeconds is how long a ticket is good for.
const TicketTTLSeconds = 30

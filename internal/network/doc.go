// Package network is everything the daemon does on a sandbox's network
// path, on the host side of the boundary, so that egress policy holds
// without the sandbox's cooperation (docs/network.md):
//
//   - Manager (manager.go) wires a sandbox to the network and unwires it;
//     one per daemon, its nftables table and veth alias named after the
//     daemon's cgroup parent so that daemons sharing a host leave each
//     other alone.
//   - Addresses: a /30 per sandbox from Pool (pool.go); the veth pair
//     between the sandbox's network namespace and the host (link.go); a
//     namespace made before the sandbox starts, for tiers that need it
//     (netns.go).
//   - Policy: allow/deny rules parsed into Policy (rules.go, domain.go)
//     and compiled into the sandbox's nftables chain and NAT (firewall.go,
//     dnsfw.go).
//   - Domain rules: per sandbox, a DNS server on its gateway that answers
//     only allowed names and pins their addresses into the chain's set
//     (dns.go), and the SNI/Host proxy that TCP 80 and 443 are redirected
//     to (sniproxy.go; plain HTTP request by request in httprelay.go).
//   - The egress log: the resolver's and proxy's decisions, and the
//     firewall's own through NFLOG read over netlink (nflog.go), into a
//     ring per sandbox (egresslog.go) and counters for /metrics
//     (egresscount.go).
//   - Limits: connection counts and bandwidth shaping with tc (limits.go).
package network

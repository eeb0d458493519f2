package network

import (
	"encoding/binary"
	"errors"
	"hash/fnv"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
)

// Connections the firewall decides itself (every port but the proxied
// 80 and 443) reach the egress log through NFLOG: each accept and reject
// rule of a sandbox chain logs new flows to the daemon's NFLOG group with
// the prefix "abx <id> allow|deny <reason>", and the daemon reads the
// group over netlink (NETLINK_NETFILTER, subsystem ULOG), taking the
// destination from the first bytes of the packet. Established traffic is
// accepted before any logging rule.
//
// A sandbox cannot make the daemon parse packets faster than its log
// rate: every log rule of its chain goes through one named limit object,
// log-<id> (logRate packets a second, logBurst at once), shared by all of
// them. Past it a rule does not log, and the verdict rule after it
// decides as always; the egress log then misses flows, which it says
// nowhere but here (a reject flood is what it would miss).

// The nfnetlink_log protocol (linux/netfilter/nfnetlink_log.h), absent
// from x/sys.
const (
	nfulnlMsgPacket   = 0
	nfulnlMsgConfig   = 1
	nfulaPayload      = 9
	nfulaPrefix       = 10
	nfulaCfgCmd       = 1
	nfulaCfgMode      = 2
	nfulnlCfgCmdBind  = 1
	nfulnlCopyPacket  = 2
	nflogSnaplen      = 64 // IPv4 header with options, and the ports
	nflogPrefixMaxLen = 127
)

// The per-sandbox log rate: well above what a program that is not
// flooding opens, far below what costs the daemon CPU worth measuring.
const (
	logRate  = 20
	logBurst = 40
)

func logLimitName(id string) string { return "log-" + id }

// addLogLimit queues sandbox id's log rate object; it must come before
// the sandbox chain's rules, which refer to it. An object left from an
// earlier attach is kept as it is.
func (f *firewall) addLogLimit(c *nftables.Conn, id string) {
	if f.nflog == 0 {
		return
	}
	c.AddObj(&nftables.NamedObj{Table: f.table, Name: logLimitName(id), Type: nftables.ObjTypeLimit,
		Obj: &expr.Limit{Type: expr.LimitTypePkts, Rate: logRate, Unit: expr.LimitTimeSecond, Burst: logBurst}})
}

// delLogLimit queues the removal of sandbox id's log rate object, after
// its chain (whose rules refer to it).
func (f *firewall) delLogLimit(c *nftables.Conn, id string) {
	if f.nflog == 0 {
		return
	}
	c.DeleteObject(&nftables.NamedObj{Table: f.table, Name: logLimitName(id), Type: nftables.ObjTypeLimit})
}

// nflogGroupOf picks a daemon's NFLOG group from its table name, so that
// daemons on one host (tests) use different groups.
func nflogGroupOf(name string) uint16 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return uint16(1000 + h.Sum32()%60000)
}

// logExpr is the log statement of a sandbox-chain rule, or nothing when
// the firewall does not log.
func (f *firewall) logExpr(id string, allow bool, reason string) []expr.Any {
	if f.nflog == 0 {
		return nil
	}
	v := api.VerdictDeny
	if allow {
		v = api.VerdictAllow
	}
	p := "abx " + id + " " + v + " " + reason
	if len(p) > nflogPrefixMaxLen {
		p = p[:nflogPrefixMaxLen]
	}
	return []expr.Any{&expr.Objref{Type: int(nftables.ObjTypeLimit), Name: logLimitName(id)}, &expr.Log{
		Key:     1<<unix.NFTA_LOG_GROUP | 1<<unix.NFTA_LOG_PREFIX | 1<<unix.NFTA_LOG_SNAPLEN,
		Group:   f.nflog,
		Snaplen: nflogSnaplen,
		Data:    []byte(p),
	}}
}

// startNFLOG binds the firewall's NFLOG group and records what it reads
// into the sandboxes' egress logs until stopNFLOG. Without it (the group
// is taken, or the kernel lacks nfnetlink_log) rules log to nobody and
// the egress log holds the resolver's and the proxy's decisions only.
func (m *Manager) startNFLOG() error {
	m.stopNFLOG()
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return err
	}
	group := m.fw.nflog
	cfg := func(attrs []netlink.Attribute) error {
		b, err := netlink.MarshalAttributes(attrs)
		if err != nil {
			return err
		}
		hdr := []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, 0}
		binary.BigEndian.PutUint16(hdr[2:], group)
		_, err = c.Execute(netlink.Message{
			Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_ULOG<<8 | nfulnlMsgConfig),
				Flags: netlink.Request | netlink.Acknowledge},
			Data: append(hdr, b...),
		})
		return err
	}
	mode := make([]byte, 6)
	binary.BigEndian.PutUint32(mode, nflogSnaplen)
	mode[4] = nfulnlCopyPacket
	if err := cfg([]netlink.Attribute{{Type: nfulaCfgCmd, Data: []byte{nfulnlCfgCmdBind}}}); err != nil {
		c.Close()
		return err
	}
	if err := cfg([]netlink.Attribute{{Type: nfulaCfgMode, Data: mode}}); err != nil {
		c.Close()
		return err
	}
	done := make(chan struct{})
	m.gmu.Lock()
	m.nflog = &nflogReader{conn: c, done: done}
	m.gmu.Unlock()
	go func() {
		defer close(done)
		for {
			msgs, err := c.Receive()
			if err != nil {
				var oe *netlink.OpError
				if errors.As(err, &oe) && errors.Is(oe.Err, unix.ENOBUFS) {
					continue // the kernel dropped messages: go on
				}
				return // closed
			}
			for _, msg := range msgs {
				if msg.Header.Type == netlink.HeaderType(unix.NFNL_SUBSYS_ULOG<<8|nfulnlMsgPacket) {
					m.recordNFLOG(msg.Data)
				}
			}
		}
	}()
	return nil
}

// nflogReader is the open NFLOG socket and its reader's end.
type nflogReader struct {
	conn *netlink.Conn
	done chan struct{}
}

// stopNFLOG closes the NFLOG socket and waits for its reader.
func (m *Manager) stopNFLOG() {
	m.gmu.Lock()
	r := m.nflog
	m.nflog = nil
	m.gmu.Unlock()
	if r != nil {
		r.conn.Close()
		<-r.done
	}
}

// recordNFLOG turns one NFLOG packet message into an egress log entry.
func (m *Manager) recordNFLOG(data []byte) {
	if len(data) < 4 {
		return
	}
	ad, err := netlink.NewAttributeDecoder(data[4:])
	if err != nil {
		return
	}
	var prefix string
	var payload []byte
	for ad.Next() {
		switch ad.Type() {
		case nfulaPrefix:
			prefix = strings.TrimRight(string(ad.Bytes()), "\x00")
		case nfulaPayload:
			payload = ad.Bytes()
		}
	}
	f := strings.SplitN(prefix, " ", 4)
	if len(f) < 4 || f[0] != "abx" {
		return
	}
	id := f[1]
	proto, dst, ok := parseIPv4(payload)
	if !ok {
		return
	}
	e := api.EgressLogEntry{Time: time.Now().UTC(), Kind: api.EgressKindConnect, Proto: proto, Dest: dst.String(),
		Verdict: f[2], Reason: "firewall: " + f[3]}
	m.gmu.Lock()
	l, g := m.logs[id], m.guards[id]
	m.gmu.Unlock()
	if l == nil {
		return
	}
	if g != nil {
		e.Name = g.nameOf(dst.Addr())
	}
	l.add(e)
}

// parseIPv4 returns the protocol name and destination of an IPv4 packet
// (port 0 for protocols without ports).
func parseIPv4(p []byte) (string, netip.AddrPort, bool) {
	if len(p) < 20 || p[0]>>4 != 4 {
		return "", netip.AddrPort{}, false
	}
	ihl := int(p[0]&0x0f) * 4
	dst := netip.AddrFrom4([4]byte(p[16:20]))
	var port uint16
	var proto string
	switch p[9] {
	case unix.IPPROTO_TCP:
		proto = "tcp"
	case unix.IPPROTO_UDP:
		proto = "udp"
	case unix.IPPROTO_ICMP:
		proto = "icmp"
	default:
		proto = strconv.Itoa(int(p[9]))
	}
	if (proto == "tcp" || proto == "udp") && len(p) >= ihl+4 {
		port = binary.BigEndian.Uint16(p[ihl+2 : ihl+4])
	}
	return proto, netip.AddrPortFrom(dst, port), true
}

// nameOf returns a name addr is pinned for, or "".
func (g *guard) nameOf(addr netip.Addr) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	for n, until := range g.resolved[addr] {
		if until.After(now) {
			return n
		}
	}
	return ""
}

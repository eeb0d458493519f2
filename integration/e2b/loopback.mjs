// Test harness only (node --import ./loopback.mjs): every name under
// E2B_TEST_RESOLVE resolves to 127.0.0.1, as a wildcard DNS record
// (*.<domain>) pointing at the daemon's machine would, so that the SDK's
// https://<port>-<id>.<domain> and https://api.<domain> URLs reach the
// test daemon without /etc/hosts. Nothing of the SDK is changed.
import dns from 'node:dns'

const domain = process.env.E2B_TEST_RESOLVE
const lookup = dns.lookup
dns.lookup = function (host, opts, cb) {
  if (typeof opts === 'function') {
    cb = opts
    opts = {}
  } else if (typeof opts === 'number') {
    opts = { family: opts }
  }
  const name = String(host).toLowerCase()
  if (domain && (name === domain || name.endsWith('.' + domain))) {
    if (opts && opts.all) return process.nextTick(cb, null, [{ address: '127.0.0.1', family: 4 }])
    return process.nextTick(cb, null, '127.0.0.1', 4)
  }
  return lookup.call(this, host, opts, cb)
}

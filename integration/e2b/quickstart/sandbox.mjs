// E2B's "first sandbox" quickstart, as a user would copy it: nothing in
// it knows about agentbox; only E2B_API_KEY (and here E2B_API_URL /
// E2B_SANDBOX_URL) are set. The last line, the sandbox id, is for the
// test to clean up with.
import { Sandbox } from 'e2b'

const sandbox = await Sandbox.create()
const result = await sandbox.commands.run('echo "hello from $(uname -s)"')
console.log(result.stdout.trim())
await sandbox.files.write('/tmp/notes.txt', 'written by the quickstart')
console.log(await sandbox.files.read('/tmp/notes.txt'))
console.log(sandbox.sandboxId)

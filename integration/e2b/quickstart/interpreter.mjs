// @e2b/code-interpreter's quickstart, as a user would copy it: run Python
// in a fresh sandbox, print its logs, list the root directory. The last
// line, the sandbox id, is for the test to clean up with.
import { Sandbox } from '@e2b/code-interpreter'

const sbx = await Sandbox.create() // alive for 5 minutes by default
const execution = await sbx.runCode('print("hello world")')
console.log(execution.logs)
const files = await sbx.files.list('/')
console.log(files.map((f) => f.name).join(' '))
console.log(sbx.sandboxId)

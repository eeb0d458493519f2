// The package is "type": "module"; the CommonJS build says otherwise for
// its own directory, so Node loads dist/cjs/*.js as CommonJS.
import { writeFileSync } from "node:fs";

writeFileSync(new URL("../dist/cjs/package.json", import.meta.url), '{\n  "type": "commonjs"\n}\n');

// The package's type declarations: a program using the SDK compiles
// against them with the ES module resolution and the CommonJS one.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const tsc = fileURLToPath(new URL("../node_modules/typescript/bin/tsc", import.meta.url));

for (const project of ["tsconfig.json", "tsconfig.cjs.json"]) {
  test(`types compile (${project})`, () => {
    const p = fileURLToPath(new URL("types/" + project, import.meta.url));
    try {
      execFileSync(process.execPath, [tsc, "-p", p], { encoding: "utf8", stdio: "pipe" });
    } catch (e) {
      assert.fail(`tsc -p ${p}:\n${e.stdout}${e.stderr}`);
    }
  });
}

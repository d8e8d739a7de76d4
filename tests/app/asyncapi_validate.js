// Parse the AsyncAPI document on stdin with the official parser (@asyncapi/parser) and print
// its diagnostics as JSON: [{severity, code, message, path}], severity 0 error, 1 warning,
// 2 information, 3 hint. Exit 0 once printed (the test judges them).
const { Parser } = require("@asyncapi/parser");

let text = "";
process.stdin.on("data", (chunk) => { text += chunk; });
process.stdin.on("end", async () => {
  const { diagnostics } = await new Parser().parse(text);
  const out = diagnostics.map((d) => ({
    severity: d.severity, code: String(d.code), message: d.message, path: d.path.join("/"),
  }));
  process.stdout.write(JSON.stringify(out));
});

#!/usr/bin/env node
// Compiles contracts-abi/src with the pinned solc-js (contracts-abi/node_modules/solc) and writes
//   contracts-abi/artifacts/<Name>.json   {contractName, abi, bytecode, deployedBytecode, compiler}
//   contracts-abi/<IName>.json            {abi}   (read by the Rust `sol!` bindings)
// and, from Chainlink's UNMODIFIED source (not in contracts-abi/src), the production forwarder
//   contracts-abi/artifacts/KeystoneForwarder.json
// from @chainlink/contracts 1.5.0's src/v0.8/keystone/KeystoneForwarder.sol, which
// scripts/install-tools.sh puts in contracts-abi/node_modules/@chainlink/contracts (npm pack,
// integrity pinned, no dependencies). It imports OpenZeppelin 4.8.3 and 5.0.2 under Chainlink's
// own import paths (`@openzeppelin/contracts@4.8.3/…`), remapped to the npm aliases
// @openzeppelin/contracts-4.8.3 and -5.0.2 pinned in contracts-abi/package.json.
//
//   node scripts/compile-contracts.mjs           regenerate the committed files
//   node scripts/compile-contracts.mjs --check   compile in memory; exit 1 if any committed file is stale
//
// Output is deterministic: fixed source unit names, optimizer 200 runs, fixed EVM version and
// metadata.bytecodeHash "none" (no metadata hash in the bytecode), so it does not depend on the
// checkout path. Besides compiling, it checks that every function/event of each interface exists
// in its implementation with the same types, and that every implementation function and custom
// error is declared in the interface, so the ABIs the engine binds to cannot drift.

import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const ABI_DIR = path.join(ROOT, "contracts-abi");
const SRC_DIR = path.join(ABI_DIR, "src");
const ARTIFACT_DIR = path.join(ABI_DIR, "artifacts");
const REGENERATE = "run: node scripts/compile-contracts.mjs";

const CHAINLINK_VERSION = "1.5.0";
const CHAINLINK_DIR = path.join(ABI_DIR, "node_modules", "@chainlink", "contracts");
// Contracts compiled from third-party source as published, keyed by contract name: their source
// unit names stay under node_modules/ so their relative imports resolve through findImports.
const EXTERNAL_UNITS = {
  KeystoneForwarder: "node_modules/@chainlink/contracts/src/v0.8/keystone/KeystoneForwarder.sol",
};
const INSTALL_CHAINLINK = `run: scripts/install-tools.sh (it fetches @chainlink/contracts ${CHAINLINK_VERSION} without its dependencies)`;

const EVM_VERSION = "cancun";
const OPTIMIZER_RUNS = 200;

const IMPLEMENTATIONS = [
  "CREsolverMarket",
  "IdentityRegistry",
  "ReputationRegistry",
  "CREReceiver",
  "TestForwarder",
  "StrictForwarder",
  "Multicall3",
  "KeystoneForwarder",
];
const INTERFACES = [
  "ICREsolverMarket",
  "IIdentityRegistry",
  "IReputationRegistry",
  "IReceiver",
  "IKeystoneForwarder",
  "IMulticall3",
];
// [interface, implementation, interface must cover every implementation function and error]
const PAIRS = [
  ["ICREsolverMarket", "CREsolverMarket", true],
  ["IIdentityRegistry", "IdentityRegistry", true],
  ["IReputationRegistry", "ReputationRegistry", true],
  ["IKeystoneForwarder", "TestForwarder", true],
  ["IMulticall3", "Multicall3", true],
  ["IReceiver", "CREReceiver", false],
  // the production forwarder has the surface our interface declares (it has more: config, router)
  ["IKeystoneForwarder", "KeystoneForwarder", false],
];

function fail(message) {
  process.stderr.write(`compile-contracts: ${message}\n`);
  process.exit(1);
}

function loadSolc() {
  const require = createRequire(path.join(ABI_DIR, "package.json"));
  try {
    return require("solc");
  } catch {
    fail("solc is not installed in contracts-abi/node_modules: run scripts/install-tools.sh (or npm ci --prefix contracts-abi)");
  }
}

// Fails unless @chainlink/contracts is installed at the pinned version.
function checkChainlink() {
  let version;
  try {
    version = JSON.parse(fs.readFileSync(path.join(CHAINLINK_DIR, "package.json"), "utf8")).version;
  } catch {
    fail(`@chainlink/contracts is not installed in contracts-abi/node_modules (the source of KeystoneForwarder): ${INSTALL_CHAINLINK}`);
  }
  if (version !== CHAINLINK_VERSION) {
    fail(`contracts-abi/node_modules/@chainlink/contracts is ${version}, want ${CHAINLINK_VERSION}: remove it and ${INSTALL_CHAINLINK}`);
  }
  for (const unit of Object.values(EXTERNAL_UNITS)) {
    if (!fs.existsSync(path.join(ABI_DIR, unit))) fail(`contracts-abi/${unit} is missing: ${INSTALL_CHAINLINK}`);
  }
}

function listSources(dir) {
  const out = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) out.push(...listSources(full));
    else if (entry.name.endsWith(".sol")) out.push(full);
  }
  return out;
}

function sourceUnitName(file) {
  return path.relative(ABI_DIR, file).split(path.sep).join("/");
}

function findImports(unitName) {
  const resolved = path.resolve(ABI_DIR, unitName);
  if (!resolved.startsWith(ABI_DIR + path.sep)) return { error: `import outside contracts-abi: ${unitName}` };
  try {
    return { contents: fs.readFileSync(resolved, "utf8") };
  } catch {
    return { error: `file not found: ${unitName}` };
  }
}

function compile(solc) {
  const sources = {};
  for (const file of listSources(SRC_DIR).sort()) {
    sources[sourceUnitName(file)] = { content: fs.readFileSync(file, "utf8") };
  }
  for (const unit of Object.values(EXTERNAL_UNITS)) {
    sources[unit] = { content: fs.readFileSync(path.join(ABI_DIR, unit), "utf8") };
  }
  const input = {
    language: "Solidity",
    sources,
    settings: {
      remappings: [
        "@openzeppelin/=node_modules/@openzeppelin/",
        // Chainlink's versioned import paths (its remappings.txt), to the pinned npm aliases
        "@openzeppelin/contracts@4.8.3/=node_modules/@openzeppelin/contracts-4.8.3/",
        "@openzeppelin/contracts@5.0.2/=node_modules/@openzeppelin/contracts-5.0.2/",
      ],
      optimizer: { enabled: true, runs: OPTIMIZER_RUNS },
      evmVersion: EVM_VERSION,
      metadata: { bytecodeHash: "none" },
      outputSelection: { "*": { "*": ["abi", "evm.bytecode.object", "evm.deployedBytecode.object"] } },
    },
  };
  const output = JSON.parse(solc.compile(JSON.stringify(input), { import: findImports }));
  const diagnostics = output.errors ?? [];
  const errors = diagnostics.filter((d) => d.severity === "error");
  for (const d of diagnostics.filter((d) => d.severity !== "error")) {
    process.stderr.write(`${d.formattedMessage ?? d.message}\n`);
  }
  if (errors.length > 0) {
    for (const d of errors) process.stderr.write(`${d.formattedMessage ?? d.message}\n`);
    fail(`solc reported ${errors.length} error(s)`);
  }
  return output;
}

function contractOutput(output, name) {
  const external = EXTERNAL_UNITS[name];
  if (external) {
    const contract = output.contracts?.[external]?.[name];
    if (!contract) fail(`no compiler output for ${name} (expected contract ${name} in ${external})`);
    return contract;
  }
  const unit = output.contracts?.[`src/${name}.sol`] ?? output.contracts?.[`src/interfaces/${name}.sol`];
  const contract = unit?.[name];
  if (!contract) fail(`no compiler output for ${name} (expected contract ${name} in src/${name}.sol or src/interfaces/${name}.sol)`);
  return contract;
}

function canonicalType(param) {
  if (!param.type.startsWith("tuple")) return param.type;
  return `(${param.components.map(canonicalType).join(",")})${param.type.slice("tuple".length)}`;
}

function signature(item) {
  const inputs = (item.inputs ?? [])
    .map((p) => canonicalType(p) + (item.type === "event" && p.indexed ? " indexed" : ""))
    .join(",");
  switch (item.type) {
    case "function":
      return `function ${item.name}(${inputs}) returns (${(item.outputs ?? []).map(canonicalType).join(",")}) ${item.stateMutability}`;
    case "event":
      return `event ${item.name}(${inputs})${item.anonymous ? " anonymous" : ""}`;
    case "error":
      return `error ${item.name}(${inputs})`;
    default:
      return `${item.type}(${inputs})`;
  }
}

function checkPair(output, ifaceName, implName, complete) {
  const sigs = (name, type) =>
    new Set(contractOutput(output, name).abi.filter((i) => i.type === type).map(signature));
  const problems = [];
  for (const type of ["function", "event"]) {
    const impl = sigs(implName, type);
    for (const s of sigs(ifaceName, type)) if (!impl.has(s)) problems.push(`${implName} lacks ${s} (declared in ${ifaceName})`);
  }
  if (complete) {
    for (const type of ["function", "error"]) {
      const iface = sigs(ifaceName, type);
      for (const s of sigs(implName, type)) if (!iface.has(s)) problems.push(`${ifaceName} lacks ${s} (present in ${implName})`);
    }
  }
  return problems;
}

function render(value) {
  return `${JSON.stringify(value, null, 2)}\n`;
}

function expectedFiles(solc, output) {
  const compiler = solc.version().replace(/\.Emscripten\.clang$/, "");
  const files = new Map();
  for (const name of IMPLEMENTATIONS) {
    const c = contractOutput(output, name);
    files.set(
      path.join("contracts-abi", "artifacts", `${name}.json`),
      render({
        contractName: name,
        abi: c.abi,
        bytecode: `0x${c.evm.bytecode.object}`,
        deployedBytecode: `0x${c.evm.deployedBytecode.object}`,
        compiler,
      }),
    );
  }
  for (const name of INTERFACES) {
    files.set(path.join("contracts-abi", `${name}.json`), render({ abi: contractOutput(output, name).abi }));
  }
  return files;
}

function readOrNull(file) {
  try {
    return fs.readFileSync(file, "utf8");
  } catch {
    return null;
  }
}

function unexpectedArtifacts(files) {
  if (!fs.existsSync(ARTIFACT_DIR)) return [];
  return fs
    .readdirSync(ARTIFACT_DIR)
    .filter((f) => f.endsWith(".json"))
    .map((f) => path.join("contracts-abi", "artifacts", f))
    .filter((rel) => !files.has(rel));
}

function main() {
  const args = process.argv.slice(2);
  const unknown = args.filter((a) => a !== "--check");
  if (unknown.length > 0) fail(`unknown argument(s): ${unknown.join(" ")} (usage: node scripts/compile-contracts.mjs [--check])`);
  const check = args.includes("--check");

  const solc = loadSolc();
  checkChainlink();
  const output = compile(solc);

  const drift = PAIRS.flatMap(([iface, impl, complete]) => checkPair(output, iface, impl, complete));
  if (drift.length > 0) fail(`interface/implementation ABI drift:\n  ${drift.join("\n  ")}`);

  const files = expectedFiles(solc, output);
  const extra = unexpectedArtifacts(files);

  if (check) {
    const stale = [];
    for (const [rel, content] of files) {
      const current = readOrNull(path.join(ROOT, rel));
      if (current === null) stale.push(`${rel} (missing)`);
      else if (current !== content) stale.push(`${rel} (differs)`);
    }
    for (const rel of extra) stale.push(`${rel} (no longer produced)`);
    if (stale.length > 0) {
      fail(`contract artifacts are stale:\n  ${stale.join("\n  ")}\n${REGENERATE}`);
    }
    process.stdout.write(`compile-contracts: ${files.size} artifacts up to date (solc ${solc.version()})\n`);
    return;
  }

  fs.mkdirSync(ARTIFACT_DIR, { recursive: true });
  let written = 0;
  for (const [rel, content] of files) {
    const full = path.join(ROOT, rel);
    if (readOrNull(full) === content) continue;
    fs.writeFileSync(full, content);
    process.stdout.write(`wrote ${rel}\n`);
    written++;
  }
  for (const rel of extra) {
    fs.rmSync(path.join(ROOT, rel));
    process.stdout.write(`removed ${rel}\n`);
  }
  process.stdout.write(`compile-contracts: ${files.size} artifacts, ${written} updated (solc ${solc.version()})\n`);
}

main();

// Builds the extension for each browser from this one source folder:
//   dist/chromium/  manifest.json as it is (side panel, background service worker)
//   dist/firefox/   manifest.json with Firefox's keys (sidebar, background event page, add-on id)
// Usage: node build.mjs [--out DIR] [chromium|firefox ...]   (npm run build: both into dist/)
// No dependencies. Each <out>/<browser>/ is rebuilt from scratch; the tests build into a directory of their own
// (--out) so a build in dist/ never pulls files from under a browser that a test session has loaded.
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, isAbsolute, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

const SOURCE = dirname(fileURLToPath(import.meta.url));
const DEFAULT_OUT = join(SOURCE, "dist");
export const ADDON_ID = "chorus@persmem";

// Everything in the source folder ships except these (build tooling, tests, docs, the source manifest).
const NOT_SHIPPED = new Set([
  "dist", "node_modules", "tests", "build.mjs", "package.json", "package-lock.json", "README.md", "manifest.json",
]);

// extension/manifest.json is the Chromium manifest (so "Load unpacked" on the source folder keeps working);
// Firefox's differs only in how the panel and the background are declared, and in the add-on id.
function chromiumManifest(source) {
  return source;
}

function firefoxManifest(source) {
  const { side_panel: sidePanel, background, ...rest } = source;
  return {
    ...rest,
    permissions: source.permissions.filter((p) => p !== "sidePanel"),
    background: { scripts: [background.service_worker] },
    sidebar_action: {
      default_panel: sidePanel.default_path,
      default_title: source.action?.default_title ?? source.name,
    },
    browser_specific_settings: {
      gecko: {
        id: ADDON_ID,
        // The oldest Firefox whose manifest keys all this uses (data_collection_permissions came in 140).
        strict_min_version: "140.0",
        // Chorus sends nothing to its authors or third parties; it talks only to the persmem server the user
        // configures, and to the chat sites the user already uses.
        data_collection_permissions: { required: ["none"] },
      },
    },
  };
}

const BROWSERS = { chromium: chromiumManifest, firefox: firefoxManifest };

function readSourceManifest() {
  const path = join(SOURCE, "manifest.json");
  const manifest = JSON.parse(readFileSync(path, "utf8"));
  for (const key of ["background", "side_panel"]) {
    if (!manifest[key]) throw new Error(`${path} has no "${key}" key; the build derives both browsers' panel and background from it`);
  }
  if (!manifest.background.service_worker) {
    throw new Error(`${path}: background.service_worker is missing; it names the background script for both browsers`);
  }
  return manifest;
}

function checkFilesExist(out, manifest) {
  const named = [
    ...(manifest.background.scripts ?? [manifest.background.service_worker]),
    manifest.side_panel?.default_path ?? manifest.sidebar_action?.default_panel,
  ];
  for (const file of named) {
    if (!existsSync(join(out, file))) throw new Error(`${join(out, "manifest.json")} names ${file}, which is not in the source folder`);
  }
}

export function build(browsers = Object.keys(BROWSERS), outDir = DEFAULT_OUT) {
  const inSource = relative(SOURCE, outDir);
  if (!inSource.startsWith("..") && !isAbsolute(inSource) && !NOT_SHIPPED.has(inSource.split(sep)[0])) {
    throw new Error(`--out ${outDir} is inside the source folder, so the next build would ship it; use dist/ or a folder outside ${SOURCE}`);
  }
  const source = readSourceManifest();
  const shipped = readdirSync(SOURCE).filter((name) => !NOT_SHIPPED.has(name) && !name.startsWith("."));
  const outputs = {};
  for (const browser of browsers) {
    const makeManifest = BROWSERS[browser];
    if (!makeManifest) throw new Error(`unknown browser "${browser}"; known: ${Object.keys(BROWSERS).join(", ")}`);
    const out = join(outDir, browser);
    rmSync(out, { recursive: true, force: true });
    mkdirSync(out, { recursive: true });
    for (const name of shipped) cpSync(join(SOURCE, name), join(out, name), { recursive: true });
    const manifest = makeManifest(structuredClone(source));
    writeFileSync(join(out, "manifest.json"), JSON.stringify(manifest, null, 2) + "\n");
    checkFilesExist(out, manifest);
    outputs[browser] = out;
  }
  return outputs;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  try {
    const args = process.argv.slice(2);
    let outDir = DEFAULT_OUT;
    const outAt = args.indexOf("--out");
    if (outAt >= 0) {
      outDir = args[outAt + 1];
      if (!outDir) throw new Error("--out needs a directory: node build.mjs --out DIR");
      args.splice(outAt, 2);
    }
    const outputs = build(args.length ? args : undefined, resolve(outDir));
    for (const [browser, out] of Object.entries(outputs)) console.log(`${browser}: ${out}`);
  } catch (error) {
    console.error(`build.mjs: ${error.message}`);
    process.exit(1);
  }
}

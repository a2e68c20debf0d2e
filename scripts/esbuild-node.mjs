// What every esbuild bundle of this project shares (the broker's, the local runtime's, the
// benchmark's and the chaos suite's): one ESM file for Node 24. An ESM bundle that inlines
// CommonJS code (the AWS SDK) calls `require` for Node built-ins; ESM has no `require`, so the
// banner makes one from import.meta.url.
export const NODE_ESM = {
  bundle: true,
  platform: 'node',
  target: 'node24',
  format: 'esm',
  banner: {
    js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);",
  },
};

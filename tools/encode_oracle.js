#!/usr/bin/env node
// Oracle for the C++ GPT-2 tokenizer: prints the ids the gpt-3-encoder npm
// package's encode() gives for a file, as a JSON array.
//   node tools/encode_oracle.js <text-file> [<node_modules dir>]
// Several texts at once: --multi <file> reads a JSON array of strings and
// prints a JSON array of id arrays (one node start-up for many cases).
'use strict';
const fs = require('fs');
const path = require('path');

const args = process.argv.slice(2);
const multi = args[0] === '--multi';
if (multi) args.shift();
if (args.length < 1) {
  console.error('usage: node encode_oracle.js [--multi] <file> [<node_modules dir>]');
  process.exit(2);
}
const modules = args[1] || process.env.BRAID_DATA_PACKAGES ||
    path.join(__dirname, '..', 'third_party', 'npm', 'node_modules');
const { encode } = require(path.join(modules, 'gpt-3-encoder'));
const text = fs.readFileSync(args[0], 'utf8');
const out = multi ? JSON.parse(text).map((s) => encode(s)) : encode(text);
process.stdout.write(JSON.stringify(out) + '\n');

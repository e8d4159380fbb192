/**
 * The manifest's JSON Schema, generated from the zod schemas, for editors (yaml-language-server),
 * and the README's table of each model's input fields, generated from the same model definitions.
 *
 * A step's `input` is described per model (`if model is X then input is X's request`), so editors
 * complete its fields and flag a typo. Inputs are templates before they are requests: every field
 * that is not plain text also takes a `{{ ... }}` string, and URL fields take local paths too.
 */
import * as z from 'zod';
import { MODEL_DEFINITIONS } from '../models/registry.js';
import { Manifest } from './schema.js';

type Json = Record<string, unknown>;

const TEMPLATE: Json = {
  type: 'string',
  pattern: '\\{\\{.*\\}\\}',
  description: 'a template: {{ axis }}, {{ row.column }}, {{ vars.x }}…',
};

function toJsonSchema(schema: z.ZodType): Json {
  const json = z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as Json;
  delete json.$schema;
  return json;
}

/** A schema node with its fields (properties, items, values, branches) made to take templates. */
function relax(node: unknown): Json {
  if (node === null || typeof node !== 'object' || Array.isArray(node)) return {};
  const out: Json = {};
  for (const [key, value] of Object.entries(node as Json)) {
    if (key === 'properties' && value && typeof value === 'object')
      out[key] = Object.fromEntries(Object.entries(value as Json).map(([k, v]) => [k, field(v)]));
    else if ((key === 'items' || key === 'additionalProperties') && value && typeof value === 'object') out[key] = field(value);
    else if (key === 'anyOf' && Array.isArray(value)) out[key] = value.map(relax);
    // Image fields may hold local paths, uploaded at run time.
    else if (key === 'format' && value === 'uri') continue;
    else out[key] = value;
  }
  return out;
}

/** What a field accepts as written in a manifest: the request's value, or a template. */
function field(node: unknown): Json {
  const relaxed = relax(node);
  const plainText = relaxed.type === 'string' && Object.keys(relaxed).every((k) => k === 'type' || k === 'description');
  if (plainText) return relaxed;
  return { anyOf: [...(Array.isArray(relaxed.anyOf) ? (relaxed.anyOf as Json[]) : [relaxed]), TEMPLATE] };
}

/** Each built-in model's input, as a JSON Schema of what a manifest may write. */
export function modelInputSchemas(): { name: string; summary: string; schema: Json }[] {
  return MODEL_DEFINITIONS.map((m) => ({ name: m.name, summary: m.summary, schema: toJsonSchema(m.inputSchema) }));
}

/** Drops `expects` (how messages name a field, see FieldWords): not a JSON Schema keyword. */
const withoutWords = (ctx: { jsonSchema: Json }): void => {
  delete ctx.jsonSchema.expects;
};

export function manifestJsonSchema(): string {
  const schema = z.toJSONSchema(Manifest, { io: 'input', unrepresentable: 'any', override: withoutWords }) as Json;
  const steps = (schema.properties as Json).steps as Json;
  const step = steps.additionalProperties as Json;
  step.allOf = modelInputSchemas().map(({ name, schema: input }) => ({
    if: { properties: { model: { const: name } }, required: ['model'] },
    then: { properties: { input: { ...relax(input), description: `The ${name} request body, before its templates are rendered.` } } },
  }));
  const document = {
    ...schema,
    $id: 'https://genpipe.dev/schemas/manifest.schema.json',
    title: 'genpipe pipeline manifest',
    description: 'Generated from src/manifest/schema.ts and src/models/ by `npm run schemas`; do not edit by hand.',
  };
  return `${JSON.stringify(document, null, 2)}\n`;
}

/** A field's type as the README shows it: `integer 1..1000000`, `cats \| dogs`, `array of URL (≤ 3)`. */
function typeText(node: Json): string {
  if (Array.isArray(node.anyOf)) {
    const branches = (node.anyOf as Json[]).filter((b) => b.type !== 'null').map(typeText);
    const nullable = (node.anyOf as Json[]).some((b) => b.type === 'null');
    return `${branches.join(' or ')}${nullable ? ' or null' : ''}`;
  }
  if (node.const !== undefined) return `\`${String(node.const)}\``;
  if (Array.isArray(node.enum)) return (node.enum as unknown[]).map((v) => `\`${String(v)}\``).join(', ');
  const type = node.type;
  if (type === 'boolean') return '`true`, `false`';
  if (type === 'integer' || type === 'number') {
    const bound = (v: unknown): number | undefined => (typeof v === 'number' && Math.abs(v) < Number.MAX_SAFE_INTEGER ? v : undefined);
    const min = bound(node.minimum);
    const max = bound(node.maximum);
    return min !== undefined || max !== undefined ? `${type} ${min ?? ''}..${max ?? ''}` : String(type);
  }
  if (type === 'string') {
    if (node.format === 'uri') return 'URL or local path';
    if (node.format === 'uuid') return 'uuid';
    if (typeof node.pattern === 'string') return `string matching \`${node.pattern}\``;
    if (node.maxLength !== undefined) return `string of ${node.minLength ?? 0}..${node.maxLength as number} characters`;
    return 'string';
  }
  if (type === 'array')
    return `list of ${typeText((node.items as Json | undefined) ?? {})}${node.maxItems !== undefined ? ` (at most ${node.maxItems as number})` : ''}`;
  if (type === 'object') {
    const props = node.properties as Json | undefined;
    if (props) return `{${Object.keys(props).join(', ')}}`;
    return 'mapping';
  }
  return 'any';
}

/** The README's "Model inputs" section body: one table per model. */
export function modelInputsMarkdown(): string {
  const parts: string[] = [];
  for (const { name, summary, schema } of modelInputSchemas()) {
    const required = new Set((schema.required as string[] | undefined) ?? []);
    parts.push(`**\`${name}\`**: ${summary}.\n\n| field | takes | |\n|---|---|---|`);
    for (const [field, node] of Object.entries((schema.properties as Json | undefined) ?? {})) {
      parts.push(`| \`${field}\` | ${typeText(node as Json).replace(/\|/g, '\\|')} | ${required.has(field) ? 'required' : ''} |`);
    }
    parts.push('');
  }
  return parts.join('\n');
}

export const MODEL_INPUTS_START = '<!-- model inputs: generated by `npm run schemas` from src/models/ -->';
export const MODEL_INPUTS_END = '<!-- end of model inputs -->';

/** The README with its model-inputs section regenerated (between the two markers). */
export function readmeWithModelInputs(readme: string): string {
  const start = readme.indexOf(MODEL_INPUTS_START);
  const end = readme.indexOf(MODEL_INPUTS_END);
  if (start < 0 || end < start) throw new Error('README.md lacks the model inputs markers');
  return `${readme.slice(0, start + MODEL_INPUTS_START.length)}\n${modelInputsMarkdown()}${readme.slice(end)}`;
}

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

/** A value as a manifest writes it, on one line (YAML flow style reads JSON). */
const yamlValue = (value: unknown): string => (typeof value === 'string' && /^[\w./*-]+$/.test(value) ? value : JSON.stringify(value));

const cell = (text: string): string => text.replace(/\|/g, '\\|').replace(/\n/g, ' ');

interface FieldSection {
  /** Where the object stands: `defaults.polling`, `steps.<id>.matrix.<axis>`. */
  path: string;
  /** One form of a field that takes several (a union's branch): its description names the form in the heading. */
  form: boolean;
  /** What the object is, when its schema says. */
  description: string | undefined;
  fields: { name: string; node: Json; required: boolean }[];
}

/** Every object of the manifest schema with its fields, in document order; a union's forms each get theirs. */
function fieldSections(schema: Json, path = '', out: FieldSection[] = []): FieldSection[] {
  if (Array.isArray(schema.anyOf)) {
    for (const branch of schema.anyOf as Json[]) fieldSections({ ...branch, form: true }, path, out);
    return out;
  }
  const props = schema.properties as Record<string, Json> | undefined;
  if (schema.type === 'object' && props) {
    const required = new Set((schema.required as string[] | undefined) ?? []);
    out.push({
      path,
      form: schema.form === true,
      description: typeof schema.description === 'string' ? schema.description : undefined,
      fields: Object.entries(props).map(([name, node]) => ({ name, node, required: required.has(name) })),
    });
    for (const [name, node] of Object.entries(props)) if (name !== 'input') fieldSections(node, path ? `${path}.${name}` : name, out);
    return out;
  }
  const values = schema.additionalProperties;
  if (schema.type === 'object' && values && typeof values === 'object')
    fieldSections(values as Json, `${path}.<${placeholder(path)}>`, out);
  if (schema.type === 'array' && schema.items && typeof schema.items === 'object') fieldSections(schema.items as Json, `${path}[]`, out);
  return out;
}

/** The name a record's keys stand for: a step id, an axis name... */
function placeholder(path: string): string {
  const last = path.split('.').at(-1) ?? '';
  return { steps: 'step', matrix: 'axis', model_concurrency: 'model', prices: 'model', vars: 'name', where: 'column' }[last] ?? 'key';
}

/**
 * The fields of the manifest schema that lack a description or an example, as `path.field`: the
 * generated reference must say what each field is and show a value it takes.
 */
export function undocumentedFields(schema: Json = z.toJSONSchema(Manifest, { io: 'input', unrepresentable: 'any' }) as Json): string[] {
  const missing: string[] = [];
  for (const section of fieldSections(schema))
    for (const { name, node } of section.fields) {
      const where = section.path ? `${section.path}.${name}` : name;
      if (typeof node.description !== 'string' || node.description === '') missing.push(`${where} (no description)`);
      if (!Array.isArray(node.examples) || node.examples.length === 0) missing.push(`${where} (no example)`);
    }
  return missing;
}

export const MANIFEST_REFERENCE_PATH = 'docs/reference/manifest.md';

/** docs/reference/manifest.md: every field of the manifest language, from the zod schemas' descriptions and examples. */
export function manifestReferenceMarkdown(): string {
  const schema = z.toJSONSchema(Manifest, { io: 'input', unrepresentable: 'any', override: withoutWords }) as Json;
  const parts = [
    '# Manifest reference',
    '',
    '<!-- Generated from src/manifest/schema.ts by `npm run schemas`; do not edit by hand. -->',
    '',
    'A manifest is one YAML file. Each table lists the fields of one mapping, where it stands in the file, and a value it takes.',
    'Editors can check a manifest as you type with `schemas/manifest.schema.json`.',
    '',
  ];
  const seen = new Set<string>();
  for (const section of fieldSections(schema)) {
    const key = `${section.path}\u0000${section.fields.map((f) => f.name).join(',')}`;
    if (seen.has(key)) continue;
    seen.add(key);
    const heading = section.path === '' ? 'Top level' : `\`${section.path}\``;
    parts.push(
      `## ${section.form && section.description ? `${heading}: ${section.description.charAt(0).toLowerCase()}${section.description.slice(1).replace(/\.$/, '')}` : heading}`,
      '',
    );
    if (section.description && section.path !== '' && !section.form) parts.push(section.description, '');
    parts.push('| field | takes | | what it is | example |', '|---|---|---|---|---|');
    for (const { name, node, required } of section.fields) {
      const example = Array.isArray(node.examples) ? `\`${name}: ${cell(yamlValue(node.examples[0]))}\`` : '';
      parts.push(
        `| \`${name}\` | ${cell(typeText(node))} | ${required ? 'required' : ''} | ${cell(String(node.description ?? ''))} | ${example} |`,
      );
    }
    parts.push('');
  }
  parts.push('## Model inputs', '', "The fields of each model's `input`, before its templates are rendered.", '', modelInputsMarkdown());
  return `${parts.join('\n').trimEnd()}\n`;
}

// CSV-driven steps: a key column names the rows, a file with another
// separator gets a hint and a `delimiter` option, an empty image cell names its row and column, and
// a template reading a column the file lacks is refused at the template.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ManifestError } from '../../src/manifest/errors.js';
import { loadManifestFile } from '../../src/manifest/load.js';
import { buildPlan, type Plan } from '../../src/plan/plan.js';

const dir = mkdtempSync(join(tmpdir(), 'genpipe-csv-rows-'));

function write(name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

function manifest(
  name: string,
  axis: string,
  input = '      prompt: "{{ row.headline }}"\n      image_urls: ["{{ row.image }}"]\n',
): string {
  return write(
    `${name}.yaml`,
    `version: 1\nname: t\nsteps:\n  ads:\n    model: marketing-image\n    matrix:\n      row: ${axis}\n    input:\n${input}`,
  );
}

async function plan(file: string): Promise<Plan> {
  return buildPlan(loadManifestFile(file));
}

async function refused(file: string): Promise<{ where: string; message: string }[]> {
  const error = await plan(file).catch((e: unknown) => e);
  expect(error).toBeInstanceOf(ManifestError);
  return (error as ManifestError).problems.map((p) => ({
    where: `${p.location.file.replace(`${dir}/`, '')}:${p.location.line}:${p.location.col}`,
    message: p.message,
  }));
}

const instances = (p: Plan): { id: string; key: string | undefined }[] => [...p.instances('ads')].map((i) => ({ id: i.id, key: i.key }));

describe('a CSV key column', () => {
  it('names instances by the key, so inserting a row renumbers nothing', async () => {
    write('products.csv', 'sku,headline,image\nSKU-1,Red shoes,https://cdn.example/1.png\nSKU-2,Blue hat,https://cdn.example/2.png\n');
    const before = instances(await plan(manifest('keyed', '{ csv: products.csv, key: sku }')));
    expect(before.map((i) => i.id)).toEqual(['ads[row=SKU-1]', 'ads[row=SKU-2]']);
    write(
      'products.csv',
      'sku,headline,image\nSKU-0,New first,https://cdn.example/0.png\nSKU-1,Red shoes,https://cdn.example/1.png\nSKU-2,Blue hat,https://cdn.example/2.png\n',
    );
    const after = instances(await plan(manifest('keyed', '{ csv: products.csv, key: sku }')));
    expect(after.slice(1)).toEqual(before);
  });

  it('without a key, instances are named by line number and an inserted row renumbers them', async () => {
    write('lines.csv', 'sku,headline,image\nSKU-1,Red shoes,https://cdn.example/1.png\n');
    expect(instances(await plan(manifest('lines', '{ csv: lines.csv }'))).map((i) => i.id)).toEqual(['ads[row=2]']);
  });

  it('refuses a repeated key at its row and column', async () => {
    write('dup.csv', 'name,sku,headline,image\na,SKU-1,x,https://cdn.example/1.png\nb,SKU-1,y,https://cdn.example/2.png\n');
    expect(await refused(manifest('dup', '{ csv: dup.csv, key: sku }'))).toEqual([
      {
        where: 'dup.csv:3:2',
        message: 'row 3 repeats the key "SKU-1" of row 2: column "sku" names the rows, so its values must be unique',
      },
    ]);
  });

  it('refuses an empty key at its row and column', async () => {
    write('empty-key.csv', 'sku,headline,image\nSKU-1,x,https://cdn.example/1.png\n  ,y,https://cdn.example/2.png\n');
    expect(await refused(manifest('empty-key', '{ csv: empty-key.csv, key: sku }'))).toEqual([
      { where: 'empty-key.csv:3:1', message: 'row 3 has an empty key: column "sku" names the rows, so every row needs a value there' },
    ]);
  });

  it('refuses a key column the file does not have', async () => {
    write('nokey.csv', 'sku,headline,image\nSKU-1,x,https://cdn.example/1.png\n');
    const [problem] = await refused(manifest('nokey', '{ csv: nokey.csv, key: id }'));
    expect(problem?.message).toMatch(/has no column "id" \(columns: sku, headline, image\)$/);
  });

  it('a row the where filter drops may repeat a key', async () => {
    write('filtered.csv', 'sku,region,headline,image\nSKU-1,EU,x,https://cdn.example/1.png\nSKU-1,US,y,https://cdn.example/2.png\n');
    expect(instances(await plan(manifest('filtered', '{ csv: filtered.csv, key: sku, where: { region: EU } }'))).map((i) => i.id)).toEqual([
      'ads[row=SKU-1]',
    ]);
  });
});

describe('a CSV separated by another character', () => {
  it('a semicolon file read as commas is refused with a hint', async () => {
    write('semi.csv', 'sku;headline;image\nA1;Hello;https://cdn.example/1.png\n');
    expect(await refused(manifest('semi', '{ csv: semi.csv }'))).toEqual([
      {
        where: 'semi.csv:1:1',
        message: 'the header row is a single column holding ";": if the file is separated by ";", add delimiter: ";" to the csv axis',
      },
    ]);
  });

  it('with delimiter: ";" it is read', async () => {
    write('semi-ok.csv', 'sku;headline;image\nA1;Hello, world;https://cdn.example/1.png\n');
    const [only] = [...(await plan(manifest('semi-ok', '{ csv: semi-ok.csv, delimiter: ";" }'))).instances('ads')];
    expect(only?.body).toMatchObject({ prompt: 'Hello, world', image_urls: ['https://cdn.example/1.png'] });
  });

  it('a delimiter longer than one character is refused at the manifest', async () => {
    const file = manifest('long-delim', '{ csv: semi.csv, delimiter: ";;" }');
    expect((await refused(file))[0]?.message).toBe('delimiter is one character, such as ";" or a tab');
  });
});

describe('CSV cells and columns in templates', () => {
  it('an empty image cell names the manifest field, the CSV row and the column', async () => {
    write('blank.csv', 'sku,headline,image\nA1,Hello,https://cdn.example/1.png\nA2,World,\n');
    expect(await refused(manifest('blank', '{ csv: blank.csv }'))).toEqual([
      {
        where: 'blank.yaml:10:20',
        message: `ads[row=3]: an image URL or path is empty: ${dir}/blank.csv has nothing in row 3, column 3 ("image")`,
      },
    ]);
  });

  it('a column the file lacks is refused at the template, with the nearest column', async () => {
    write('cols.csv', 'sku,headline,image\nA1,Hello,https://cdn.example/1.png\n');
    const file = manifest('cols', '{ csv: cols.csv }', '      prompt: "{{ row.headlne }}"\n      image_urls: ["{{ row.image }}"]\n');
    expect(await refused(file)).toEqual([
      { where: 'cols.yaml:9:15', message: '{{ row.headlne }}: the CSV file has no column "headlne"; did you mean "headline"?' },
    ]);
  });
});

describe('empty CSV cells', () => {
  it('an empty prompt cell is refused with its CSV row and column, at the template in the manifest', async () => {
    write(
      'empty-headline.csv',
      'sku,headline,image\nA1,Hello,https://cdn.example/1.png\nA2,,https://cdn.example/2.png\nA3,  ,https://cdn.example/3.png\n',
    );
    expect(await refused(manifest('empty-headline', '{ csv: empty-headline.csv }'))).toEqual([
      {
        where: 'empty-headline.yaml:9:15',
        message: `ads[row=3]: the CSV cell ${dir}/empty-headline.csv row 3, column 2 ("headline") is empty; fill it, or add "headline" to allow_empty on the row axis to send it empty`,
      },
      {
        where: 'empty-headline.yaml:9:15',
        message: `ads[row=4]: the CSV cell ${dir}/empty-headline.csv row 4, column 2 ("headline") is empty; fill it, or add "headline" to allow_empty on the row axis to send it empty`,
      },
    ]);
  });

  it('a cell inside a longer template is checked too, and a column read by no template is not', async () => {
    write('partial.csv', 'sku,headline,note\nA1,,x\nA2,Hi,\n');
    const input = '      prompt: "Buy {{ row.headline }} now"\n';
    const problems = await refused(manifest('partial', '{ csv: partial.csv }', input));
    expect(problems.map((p) => p.message)).toEqual([
      `ads[row=2]: the CSV cell ${dir}/partial.csv row 2, column 2 ("headline") is empty; fill it, or add "headline" to allow_empty on the row axis to send it empty`,
    ]);
  });

  it('allow_empty: [headline] accepts the empty cell on purpose', async () => {
    write('allowed.csv', 'sku,headline\nA1,Hello\nA2,\n');
    // With a reference image: a direct generation without one needs a prompt (the model's own rule).
    const p = await plan(
      manifest(
        'allowed',
        '{ csv: allowed.csv, allow_empty: [headline] }',
        '      prompt: "{{ row.headline }}"\n      image_urls: ["https://cdn.example.com/ref.png"]\n',
      ),
    );
    expect([...p.instances('ads')].map((i) => (i.body as { prompt: string }).prompt)).toEqual(['Hello', '']);
  });

  it('allow_empty naming a column the file lacks is refused at the axis', async () => {
    write('cols.csv', 'sku,headline\nA1,Hello\n');
    expect(
      (await refused(manifest('cols', '{ csv: cols.csv, allow_empty: [headlne] }', '      prompt: "{{ row.headline }}"\n')))[0]?.message,
    ).toMatch(/has no column "headlne"/);
  });
});

// `mc mb ALIAS/BUCKET` for the storage guide's MinIO example: makes BUCKET in the test's loopback
// S3 store (GENPIPE_DOC_S3_*), as MinIO's client would in a MinIO. Any other use is refused.
import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3';

const [verb, target] = process.argv.slice(2);
const bucket = target?.split('/')[1];
if (verb !== 'mb' || !bucket) {
  console.error('mc (test stand-in): only "mc mb ALIAS/BUCKET" is provided');
  process.exit(2);
}
const client = new S3Client({
  endpoint: process.env.GENPIPE_DOC_S3_ENDPOINT,
  region: 'us-east-1',
  forcePathStyle: true,
  credentials: { accessKeyId: process.env.GENPIPE_DOC_S3_KEY ?? '', secretAccessKey: process.env.GENPIPE_DOC_S3_SECRET ?? '' },
});
await client.send(new CreateBucketCommand({ Bucket: bucket }));
console.log(`Bucket created successfully \`${target}\`.`);

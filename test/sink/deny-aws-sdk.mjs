// Module resolution hooks for test/sink/sdk-not-loaded.test.ts: any import of an @aws-sdk package
// fails, so a process that completes without an error never loaded the SDK.
export async function resolve(specifier, context, next) {
  if (specifier.startsWith('@aws-sdk/')) throw new Error(`the AWS SDK was loaded (${specifier})`);
  return next(specifier, context);
}
